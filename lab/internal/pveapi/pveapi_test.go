package pveapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestTokenCheck(t *testing.T) {
	s := &Server{Token: func() (string, string, error) {
		return "capmox@pve!capi", "5e9a1f7c-0000-4000-8000-123456789abc", nil
	}}
	tests := []struct {
		name, auth string
		code       int
	}{
		{"right token", "PVEAPIToken=capmox@pve!capi=5e9a1f7c-0000-4000-8000-123456789abc", 200},
		{"wrong secret", "PVEAPIToken=capmox@pve!capi=00000000-0000-4000-8000-123456789abc", 401},
		{"wrong token id", "PVEAPIToken=root@pam!capi=5e9a1f7c-0000-4000-8000-123456789abc", 401},
		{"no header", "", 401},
		{"ticket style", "PVEAuthCookie=abc", 401},
		{"no secret", "PVEAPIToken=capmox@pve!capi", 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/api2/json/version", nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != tt.code {
				t.Errorf("code %d, want %d", rec.Code, tt.code)
			}
			if tt.code == 200 && !strings.Contains(rec.Body.String(), `"version":"9.2.11"`) {
				t.Errorf("body %s", rec.Body.String())
			}
		})
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/nope", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("non-API path: %d", rec.Code)
	}
}

package pveapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTokenCheck(t *testing.T) {
	store := TokenConfig{Path: filepath.Join(t.TempDir(), "token.cfg")}
	os.WriteFile(store.Path, []byte("capmox@pve!capi 5e9a1f7c-0000-4000-8000-123456789abc\nbad line\n"), 0o600)
	s := &Server{Tokens: store}
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

// TestTokenRotation: an operator rotates the token the Proxmox way, with
// pveum: remove revokes the old secret at once, add prints the new one
// once; the API takes the new one and refuses the old.
func TestTokenRotation(t *testing.T) {
	store := TokenConfig{Path: filepath.Join(t.TempDir(), "token.cfg")}
	s := &Server{Tokens: store}
	call := func(id, secret string) int {
		req := httptest.NewRequest("GET", "/api2/json/version", nil)
		req.Header.Set("Authorization", "PVEAPIToken="+id+"="+secret)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec.Code
	}
	pveum := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := PVEUM(args, store, &out, &errb)
		return code, out.String(), errb.String()
	}
	add := func() string {
		code, out, stderr := pveum("user", "token", "add", "capmox@pve", "capi", "--privsep", "0", "--output-format", "json")
		var res struct {
			FullTokenID string         `json:"full-tokenid"`
			Value       string         `json:"value"`
			Info        map[string]any `json:"info"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.FullTokenID != "capmox@pve!capi" || len(res.Value) != 36 || res.Info["privsep"] != 0.0 {
			t.Fatalf("add: %d %q %q", code, out, stderr)
		}
		return res.Value
	}
	old := add()
	if call("capmox@pve!capi", old) != 200 {
		t.Fatal("the new token is refused")
	}
	if code, _, stderr := pveum("user", "token", "add", "capmox@pve", "capi"); code != 255 || !strings.Contains(stderr, "Token already exists.") {
		t.Errorf("add twice: %d %q", code, stderr)
	}
	if code, _, stderr := pveum("user", "token", "remove", "capmox@pve", "capi"); code != 0 || stderr != "" {
		t.Fatalf("remove: %d %q", code, stderr)
	}
	if call("capmox@pve!capi", old) != 401 {
		t.Error("a removed token still works")
	}
	if code, _, stderr := pveum("user", "token", "remove", "capmox@pve", "capi"); code != 255 || stderr != "no such token 'capi' for user 'capmox@pve'\n" {
		t.Errorf("remove twice: %d %q", code, stderr)
	}
	rotated := add()
	if rotated == old || call("capmox@pve!capi", rotated) != 200 || call("capmox@pve!capi", old) != 401 {
		t.Error("rotation: the new secret is refused or the old one accepted")
	}
	if code, out, _ := pveum("user", "token", "list", "capmox@pve", "--output-format", "json"); code != 0 || out != `[{"privsep":0,"tokenid":"capi"}]`+"\n" {
		t.Errorf("list: %d %q", code, out)
	}
	if code, _, stderr := pveum("user", "token", "add", "nobody@pve", "capi"); code != 255 || stderr != "no such user ('nobody@pve')\n" {
		t.Errorf("unknown user: %d %q", code, stderr)
	}
	if b, _ := os.ReadFile(store.Path); string(b) != "capmox@pve!capi "+rotated+"\n" {
		t.Errorf("token.cfg: %q", b)
	}
}

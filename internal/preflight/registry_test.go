package preflight

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

// TestImageExists: the anonymous token flow a registry's 401 asks for,
// then the manifest's HEAD: 200 found (and remembered), 404 missing.
func TestImageExists(t *testing.T) {
	var heads int
	var srv *httptest.Server
	srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/token":
			if r.URL.Query().Get("scope") != "repository:kube-vip/kube-vip:pull" || r.URL.Query().Get("service") != "reg" {
				t.Errorf("token request %s", r.URL)
			}
			w.Write([]byte(`{"token":"t0k"}`))
		case strings.HasPrefix(r.URL.Path, "/v2/kube-vip/kube-vip/manifests/"):
			heads++
			if r.Method != http.MethodHead || !strings.Contains(r.Header.Get("Accept"), "application/vnd.oci.image.index.v1+json") {
				t.Errorf("%s %s accept %q", r.Method, r.URL, r.Header.Get("Accept"))
			}
			if r.Header.Get("Authorization") != "Bearer t0k" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="`+srv.URL+`/token",service="reg",scope="repository:kube-vip/kube-vip:pull"`)
				w.WriteHeader(401)
				return
			}
			if strings.HasSuffix(r.URL.Path, "/v1.2.3") {
				w.WriteHeader(200)
				return
			}
			w.WriteHeader(404)
		default:
			w.WriteHeader(404)
		}
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "https://")
	r := &Released{HTTP: srv.Client(), Cache: filepath.Join(t.TempDir(), "released.json")}
	cached, err := r.ImageExists(context.Background(), host+"/kube-vip/kube-vip", "v1.2.3")
	if err != nil || cached || heads != 2 {
		t.Fatalf("found: cached %v, %v, %d HEADs", cached, err, heads)
	}
	if cached, err := r.ImageExists(context.Background(), host+"/kube-vip/kube-vip", "v1.2.3"); err != nil || !cached || heads != 2 {
		t.Errorf("again: cached %v, %v, %d HEADs", cached, err, heads)
	}
	_, err = r.ImageExists(context.Background(), host+"/kube-vip/kube-vip", "v9.9.9")
	var missing *MissingError
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), "/v2/kube-vip/kube-vip/manifests/v9.9.9 answers 404") {
		t.Errorf("missing: %v", err)
	}
	for _, tc := range [][3]string{{"ghcr.io/kube-vip/kube-vip", "ghcr.io", "kube-vip/kube-vip"}, {"nginx", "registry-1.docker.io", "library/nginx"},
		{"bitnami/nginx", "registry-1.docker.io", "bitnami/nginx"}, {"localhost:5000/x", "localhost:5000", "x"}} {
		if h, rp := splitImage(tc[0]); h != tc[1] || rp != tc[2] {
			t.Errorf("splitImage(%s) = %s %s", tc[0], h, rp)
		}
	}
}

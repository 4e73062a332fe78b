package preflight

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRun: checks run side by side (two that each wait for the other
// finish), results in the checks' order; a skipped check is no failure.
func TestRun(t *testing.T) {
	a, b := make(chan struct{}), make(chan struct{})
	res := Run(context.Background(), []Check{
		{Name: "a", Run: func(context.Context) (string, error) { close(a); <-b; return "A", nil }},
		{Name: "b", Run: func(context.Context) (string, error) { close(b); <-a; return "", errors.New("broken") }},
		{Name: "c", Run: func(context.Context) (string, error) { return "", &SkippedError{Why: "offline"} }},
	})
	if res[0].Name != "a" || res[0].Detail != "A" || !res[1].Failed() || !res[2].Skipped() || res[2].Failed() {
		t.Fatalf("results %+v", res)
	}
	err := Verdict(res)
	var pe *Error
	if !errors.As(err, &pe) || len(pe.Failed) != 1 || err.Error() != "preflight: nothing was changed:\n  b: broken" {
		t.Errorf("Verdict = %v", err)
	}
	if Verdict(res[:1]) != nil {
		t.Error("a passing check failed the verdict")
	}
}

// TestReleased: a file found is asked for once (HEAD), then remembered
// across runs; a 404 is a MissingError; no answer is a skip.
func TestReleased(t *testing.T) {
	heads := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodHead {
			t.Errorf("method %s", r.Method)
		}
		heads++
		if strings.HasSuffix(r.URL.Path, "/missing") {
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	cache := filepath.Join(t.TempDir(), "mgmtctl", "released.json")
	r := &Released{Cache: cache}
	if cached, err := r.Exists(context.Background(), srv.URL+"/there"); err != nil || cached {
		t.Fatalf("first: %v %v", cached, err)
	}
	again := &Released{Cache: cache} // the next run
	if cached, err := again.Exists(context.Background(), srv.URL+"/there"); err != nil || !cached || heads != 1 {
		t.Errorf("second: cached %v, %v, %d HEADs", cached, err, heads)
	}
	var m *MissingError
	if _, err := r.Exists(context.Background(), srv.URL+"/missing"); !errors.As(err, &m) || m.Status != "404 Not Found" {
		t.Errorf("missing: %v", err)
	}
	srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var s *SkippedError
	if _, err := r.Exists(ctx, srv.URL+"/gone"); !errors.As(err, &s) {
		t.Errorf("unreachable: %v", err)
	}
}

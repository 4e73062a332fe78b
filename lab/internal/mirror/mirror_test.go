package mirror

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResetDropsDownloadsOnly: with the fault on, a GET of an image
// breaks halfway, while a HEAD (the preflight's) is answered as without
// the fault: the fault is for the download, and resetting a HEAD raced
// the client's read of its headers (CI saw the preflight fail with
// "unexpected EOF" instead of the download with curl's reset).
func TestResetDropsDownloadsOnly(t *testing.T) {
	root := t.TempDir()
	img := filepath.Join(root, "images.example", "noble.img")
	if err := os.MkdirAll(filepath.Dir(img), 0o755); err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("x", 1<<20)
	if err := os.WriteFile(img, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Server{Root: root, Reset: func() bool { return true }}

	t.Run("HEAD", func(t *testing.T) {
		// A recorder keeps what the handler writes, so a HEAD sent down
		// the reset path (half the body written) shows, whatever the timing.
		req := httptest.NewRequest(http.MethodHead, "http://images.example/noble.img", nil)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || rec.Body.Len() != 0 || rec.Header().Get("Content-Length") != "1048576" {
			t.Errorf("HEAD: %d, %d bytes of body, Content-Length %q; want 200, none, 1048576", rec.Code, rec.Body.Len(), rec.Header().Get("Content-Length"))
		}
	})
	t.Run("GET", func(t *testing.T) {
		srv := httptest.NewUnstartedServer(s)
		srv.Config.ConnContext = withConn
		srv.Start()
		defer srv.Close()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/noble.img", nil)
		req.Host = "images.example"
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil || n >= int64(len(body)) {
			t.Errorf("GET read %d of %d bytes, err %v; want it broken halfway", n, len(body), err)
		}
	})
}

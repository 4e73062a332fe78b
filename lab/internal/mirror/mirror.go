// Package mirror stands in for the internet: an HTTPS (and HTTP) server on
// the lab's mirror host that serves, per virtual host, the files the real
// sites would: the Ubuntu cloud image and its SHA256SUMS, and so on. Hosts
// reach it by the real names through their /etc/hosts; an unknown path
// answers 404 like upstream.
package mirror

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Server serves Root/<host>/<path>.
type Server struct {
	Root     string
	Addr     string // IP to listen on
	CertFile string
	KeyFile  string
	// Corrupt reports whether the image fault is on: served .img files
	// then have one byte flipped, so their sha256 no longer matches.
	Corrupt func() bool
	// Reset reports whether the dropped-connection fault is on: a .img
	// download (GET) then breaks halfway with a TCP reset.
	Reset func() bool
	// Releases serves k3s's install script and releases.
	Releases *Releases
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if s.Releases != nil && s.Releases.serve(w, r, host) {
		return
	}
	if host == "api.github.com" && s.serveGitHubAPI(w, r) {
		return
	}
	if serveRegistry(w, r, host) {
		return
	}
	clean := filepath.Clean("/" + r.URL.Path)
	p := filepath.Join(s.Root, host, clean)
	fi, err := os.Stat(p)
	if err != nil || fi.IsDir() || strings.Contains(host, "/") || host == "" || host == ".." {
		http.NotFound(w, r)
		return
	}
	// Only a GET is dropped: a HEAD (the preflight's) has no body to drop
	// halfway, and resetting it raced the client's read of the headers,
	// so the preflight failed instead of the download the fault is for.
	if strings.HasSuffix(p, ".img") && r.Method == http.MethodGet && s.Reset != nil && s.Reset() {
		resetHalfway(w, r, p, fi.Size())
		return
	}
	if strings.HasSuffix(p, ".img") && s.Corrupt != nil && s.Corrupt() {
		b, err := os.ReadFile(p)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		b[len(b)-1] ^= 0xff
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(b)
		return
	}
	http.ServeFile(w, r, p)
}

// Run serves on :443 (TLS) and :80 until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
	if err != nil {
		return err
	}
	tlsSrv := &http.Server{Addr: net.JoinHostPort(s.Addr, "443"), Handler: s, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, ConnContext: withConn}
	plain := &http.Server{Addr: net.JoinHostPort(s.Addr, "80"), Handler: s, ConnContext: withConn}
	errc := make(chan error, 2)
	go func() { errc <- tlsSrv.ListenAndServeTLS("", "") }()
	go func() { errc <- plain.ListenAndServe() }()
	select {
	case <-ctx.Done():
		_ = tlsSrv.Close()
		_ = plain.Close()
		return nil
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}

// connKey carries a request's connection, so a fault can reset it under
// HTTP/2 too, where a handler cannot hijack its stream's connection.
type connKey struct{}

func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// resetHalfway sends the headers and half the file, then resets the TCP
// connection (SO_LINGER 0): what a client sees when a proxy or the mirror
// drops it mid-transfer.
func resetHalfway(w http.ResponseWriter, r *http.Request, path string, size int64) {
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.CopyN(w, f, size/2)
	_ = http.NewResponseController(w).Flush()
	raw, _ := r.Context().Value(connKey{}).(net.Conn)
	if tc, ok := raw.(*tls.Conn); ok {
		raw = tc.NetConn()
	}
	if tcp, ok := raw.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
		_ = tcp.Close()
	}
}

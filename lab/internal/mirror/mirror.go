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
	"net"
	"net/http"
	"os"
	"path/filepath"
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
	clean := filepath.Clean("/" + r.URL.Path)
	p := filepath.Join(s.Root, host, clean)
	fi, err := os.Stat(p)
	if err != nil || fi.IsDir() || strings.Contains(host, "/") || host == "" || host == ".." {
		http.NotFound(w, r)
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
	tlsSrv := &http.Server{Addr: net.JoinHostPort(s.Addr, "443"), Handler: s, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	plain := &http.Server{Addr: net.JoinHostPort(s.Addr, "80"), Handler: s}
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

// Package pveapi serves the part of the Proxmox VE API that CAPMOX's
// credential check and mgmtctl's preflight touch: GET /api2/json/version,
// on port 8006 over HTTPS, accepting only
// "Authorization: PVEAPIToken=<tokenid>=<secret>" with the lab's token.
package pveapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
)

// Server is the simulated API.
type Server struct {
	Addr     string // IP to listen on
	CertFile string
	KeyFile  string
	// Tokens are the node's API tokens, read on every request, so a token
	// added or removed with pveum takes effect at once.
	Tokens TokenConfig
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/api2/json/") {
		http.NotFound(w, r)
		return
	}
	if !s.authorized(r) {
		// pve-http-server answers an unauthenticated API call with 401 and
		// this status line.
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"data":null}`))
		return
	}
	switch r.URL.Path {
	case "/api2/json/version":
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		_ = json.NewEncoder(w).Encode(map[string]any{"data": map[string]string{
			"version": "9.2.11", "release": "9.2", "repoid": "14a22df3",
		}})
	default:
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		w.WriteHeader(http.StatusNotImplemented)
		_, _ = w.Write([]byte(`{"data":null,"message":"Method '` + r.Method + ` ` + r.URL.Path + `' not implemented in the lab\n"}`))
	}
}

func (s *Server) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	v, ok := strings.CutPrefix(h, "PVEAPIToken=")
	if !ok {
		return false
	}
	// The token ID contains '!' and '@' but no '='; the secret follows the
	// first '='.
	id, secret, ok := strings.Cut(v, "=")
	if !ok {
		return false
	}
	tokens, err := s.Tokens.Read()
	if err != nil {
		return false
	}
	want, ok := tokens[id]
	return ok && subtle.ConstantTimeCompare([]byte(secret), []byte(want)) == 1
}

// Run serves on :8006 until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	srv := &http.Server{Addr: net.JoinHostPort(s.Addr, "8006"), Handler: s}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServeTLS(s.CertFile, s.KeyFile) }()
	select {
	case <-ctx.Done():
		return srv.Close()
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}

// Package pveapi serves the part of the Proxmox VE API that CAPMOX's
// credential check and mgmtctl's preflight touch: GET /api2/json/version
// and GET /api2/json/access/permissions, on port 8006 over HTTPS,
// accepting only "Authorization: PVEAPIToken=<tokenid>=<secret>" with a
// token of the cluster's; the cluster's access control (users,
// tokens, roles, ACLs, pools: access.go, pveum.go) and /pools, where
// mgmtctl's API mode keeps its run lock (pools.go).
package pveapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/mgmtctl/mgmtctl/lab/internal/qm"
)

// Server is the simulated API.
type Server struct {
	Addr     string // IP to listen on
	CertFile string
	KeyFile  string
	// Access is the cluster's access control, read on every request, so
	// a change made with pveum takes effect at once.
	Access Access
	// Node is this node's name: a path under another node's is proxied
	// to that node (nodes.go).
	Node string
	// QM is this node's qm, writing to stdout and stderr: the VM
	// handlers run it.
	QM func(stdout, stderr io.Writer) *qm.Node
	// Root is "/" on a lab host ("" too); tests point it elsewhere.
	Root string
	// Transport, when set, is how the node reaches others (the proxy, a
	// download); nil: the default, with the host's trust store.
	Transport http.RoundTripper

	tasks sync.Map // UPID -> *task
}

// Version is what the lab's nodes say they run (pve-manager's
// pveversion).
const Version = "9.2.11"

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/api2/json/") {
		http.NotFound(w, r)
		return
	}
	id, ok := s.authorized(r)
	if !ok {
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
			"version": Version, "release": Version[:strings.LastIndexByte(Version, '.')], "repoid": "14a22df3",
		}})
	case "/api2/json/access/permissions":
		s.permissions(w, r, id)
	case "/api2/json/pools":
		s.pools(w, r, id)
	case "/api2/json/cluster/resources":
		if s.QM != nil {
			s.resources(w, r, id)
			return
		}
		fallthrough
	default:
		if rest, ok := strings.CutPrefix(r.URL.Path, "/api2/json/nodes/"); ok && s.QM != nil {
			parts := strings.Split(rest, "/")
			s.routeNode(w, r, id, parts[0], parts[1:])
			return
		}
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		w.WriteHeader(http.StatusNotImplemented)
		_, _ = w.Write([]byte(`{"data":null,"message":"Method '` + r.Method + ` ` + r.URL.Path + `' not implemented in the lab\n"}`))
	}
}

// authorized returns the token a request authenticates as.
func (s *Server) authorized(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	v, ok := strings.CutPrefix(h, "PVEAPIToken=")
	if !ok {
		return "", false
	}
	// The token ID contains '!' and '@' but no '='; the secret follows the
	// first '='.
	id, secret, ok := strings.Cut(v, "=")
	if !ok {
		return "", false
	}
	tokens, err := s.Access.Tokens.Read()
	if err != nil {
		return "", false
	}
	want, ok := tokens[id]
	return id, ok && subtle.ConstantTimeCompare([]byte(secret), []byte(want)) == 1
}

// permissions is GET /access/permissions (pve-access-control
// src/PVE/API2/AccessControl.pm, "permissions"): the caller's own
// effective permissions (or an owned token's), on path, or on every path
// with an ACL; "path" => {"privilege" => propagate (1/0)}. Another user's
// need Sys.Audit on /access.
func (s *Server) permissions(w http.ResponseWriter, r *http.Request, caller string) {
	cfg, err := ReadUserConfig(s.Access.UserCfg)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	who := r.URL.Query().Get("userid")
	if who == "" {
		who = caller
	}
	owner, _, _ := strings.Cut(caller, "!")
	if who != caller && who != owner && !strings.HasPrefix(who, owner+"!") {
		if _, ok := cfg.Permissions(LabMajor, caller, "/access")["Sys.Audit"]; !ok {
			writeError(w, http.StatusForbidden, "Permission check failed (/access, Sys.Audit)")
			return
		}
	}
	paths := []string{"/", "/nodes", "/access/groups", "/vms", "/storage", "/sdn", "/mapping"}
	paths = append(paths, sortedKeys(cfg.ACL)...)
	if p := r.URL.Query().Get("path"); p != "" {
		paths = []string{p}
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	_ = json.NewEncoder(w).Encode(map[string]any{"data": cfg.Effective(LabMajor, who, paths)})
}

// writeError answers as pve-http-server does: the status line carries
// the message, the body {"data":null}.
func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(`{"data":null,"message":` + strconv.Quote(msg+"\n") + `}`))
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

// Package phase wires the config to the steps of each phase: it owns the
// run's connections (one per host, locked for a run that may change it)
// and builds the phases the engine runs.
package phase

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/remote"
)

// Session is what the phases of one run share: the config, whether the run
// is a check, and the connections it opened.
type Session struct {
	Config *config.Loaded
	Check  bool
	Dialer *remote.Dialer
	// Holder names this run in the host lock ("user@laptop pid 123").
	Holder string
	Log    *slog.Logger

	mu    sync.Mutex
	conns map[string]*hostConn
}

type hostConn struct {
	conn    *remote.Conn
	release func()
}

// ProxmoxTarget is the Proxmox node as an SSH target.
func (s *Session) ProxmoxTarget() remote.Target {
	p := s.Config.Cluster.Spec.Proxmox
	return remote.Target{
		Name:       p.Node,
		Addr:       withPort(p.Host),
		User:       p.User,
		KnownHosts: []string{s.Config.Env.Expand("~/.ssh/known_hosts")},
		Identities: s.identities(),
	}
}

// identities are the private keys tried after the agent's: the one beside
// spec.vm.sshPublicKeyFile first, then OpenSSH's defaults.
func (s *Session) identities() []string {
	var ids []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			ids = append(ids, p)
		}
	}
	if pub := s.Config.Env.Expand(s.Config.Cluster.Spec.VM.SSHPublicKeyFile); strings.HasSuffix(pub, ".pub") {
		add(strings.TrimSuffix(pub, ".pub"))
	}
	for _, k := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
		add(s.Config.Env.Expand(filepath.Join("~/.ssh", k)))
	}
	return ids
}

func withPort(host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	return net.JoinHostPort(host, "22")
}

// Host returns the connection to t, opening it on first use. A run that
// may change the host takes its lock first; in check mode the host comes
// behind the read-only gate and is not locked.
func (s *Session) Host(ctx context.Context, t remote.Target) (remote.Host, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[string]*hostConn{}
	}
	hc, ok := s.conns[t.Addr]
	if !ok {
		c, err := s.Dialer.Connect(ctx, t)
		if err != nil {
			return nil, err
		}
		hc = &hostConn{conn: c}
		if !s.Check {
			release, err := c.Lock(ctx, s.Holder)
			if err != nil {
				c.Close()
				return nil, err
			}
			hc.release = release
		}
		s.conns[t.Addr] = hc
	}
	if s.Check {
		return remote.ReadOnly(hc.conn), nil
	}
	return hc.conn, nil
}

// Close releases every lock and connection.
func (s *Session) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, hc := range s.conns {
		if hc.release != nil {
			hc.release()
		}
		hc.conn.Close()
	}
	s.conns = nil
}

// errNotImplemented marks a phase whose steps this version lacks; it fails
// loudly rather than report a converged phase that did nothing.
func errNotImplemented(tag string) error {
	return fmt.Errorf("phase %s is not implemented in this version of mgmtctl", tag)
}

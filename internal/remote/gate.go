package remote

import (
	"context"
	"fmt"
	"net"
)

// ReadOnly wraps h so that only read-only commands and reads pass. Steps'
// Check gets this view in every run, and in check mode so does everything
// else: a mutating call that slipped through a missing guard fails loudly
// instead of changing the lab.
func ReadOnly(h Host) Host { return gate{h} }

type gate struct{ h Host }

var _ Host = gate{}

func (g gate) Name() string { return g.h.Name() }

func (g gate) Run(ctx context.Context, c Cmd) (Result, error) {
	if !c.ReadOnly {
		return Result{}, fmt.Errorf("%s: %w", c.String(), ErrReadOnly)
	}
	return g.h.Run(ctx, c)
}

func (g gate) ReadFile(ctx context.Context, path string, sudo bool) ([]byte, error) {
	return ReadFile(ctx, g, path, sudo)
}

func (g gate) WriteFile(ctx context.Context, f File) (bool, error) {
	return false, fmt.Errorf("write %s: %w", f.Path, ErrReadOnly)
}

// DialContext passes: reading the Kubernetes API needs a connection, and
// the Kubernetes client is put in server dry-run mode on its own.
func (g gate) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return g.h.DialContext(ctx, network, addr)
}

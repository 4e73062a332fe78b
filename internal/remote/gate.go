package remote

import (
	"context"
	"net"
)

// ReadOnly is h seen as a Reader only: queries, reads and dials pass, and
// nothing else is there to call. Steps hold these; in check mode and
// status the session hands out nothing else.
func ReadOnly(h Host) Reader { return gate{h} }

type gate struct{ h Host }

var _ Reader = gate{}

func (g gate) Name() string { return g.h.Name() }

func (g gate) Look(ctx context.Context, q Query) (Result, error) {
	return g.h.Look(ctx, q)
}

func (g gate) ReadFile(ctx context.Context, path string, sudo bool) ([]byte, error) {
	return ReadFile(ctx, g, path, sudo)
}

// DialContext passes: reading the Kubernetes API needs a connection, and
// what reads it is a kube.Reader, which has no method that writes.
func (g gate) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return g.h.DialContext(ctx, network, addr)
}

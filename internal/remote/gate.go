package remote

import (
	"context"
	"net/netip"
)

// ReadOnly is h seen as a Reader only: queries, reads and probes pass, and
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

func (g gate) Probe(ctx context.Context, addr netip.AddrPort) error {
	return g.h.Probe(ctx, addr)
}

package remote_test

import (
	"context"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/remote/sshtest"
)

// The facts of a phase cost one round trip, not one per fact: compare three
// read-only commands batched with the same three run one by one, against a
// real sshd.
func BenchmarkFacts(b *testing.B) {
	c := benchConn(b)
	cmds := []remote.Query{remote.AnyQuery("uname", "-r"), remote.AnyQuery("cat", "/etc/hostname"), remote.AnyQuery("id", "-u")}
	ctx := context.Background()
	b.Run("batch", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := remote.Batch(ctx, c, false, cmds...); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("one-by-one", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for _, cmd := range cmds {
				if _, err := c.Look(ctx, cmd); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

func BenchmarkWriteFileUnchanged(b *testing.B) {
	c := benchConn(b)
	f := remote.File{Path: b.TempDir() + "/config.yaml", Content: []byte("tls-san:\n  - 192.0.2.50\n"), Mode: 0o600}
	ctx := context.Background()
	if _, err := c.WriteFile(ctx, f); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if changed, err := c.WriteFile(ctx, f); err != nil || changed {
			b.Fatalf("changed=%v err=%v", changed, err)
		}
	}
}

// benchConn connects to a fresh real sshd for the benchmark.
func benchConn(b *testing.B) *remote.Conn {
	s := sshtest.Start(b)
	c, err := (&remote.Dialer{}).Connect(context.Background(), remote.Target{Name: "pve", Addr: s.Addr, User: s.User,
		KnownHosts: []string{s.KnownHosts}, Identities: []string{s.ClientKey}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkLock takes and releases the run lock, as every run does once
// per host: the lease's heartbeat and release line against the plain
// hold-until-stdin-closes of before.
func BenchmarkLock(b *testing.B) {
	c := benchConn(b)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		release, err := c.Lock(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		release()
	}
}

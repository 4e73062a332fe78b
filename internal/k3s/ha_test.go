package k3s

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/remote/remotetest"
	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

const testToken = "K10e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855::server:5f4dcc3b5aa765d61d8327deb882cf99"

// TestClusterToken: the joining server gets the first server's token in a
// root-only file; the token is registered for redaction and never appears
// in a plan's summary or diff; a server that has it already is left alone;
// before the first server has one, the plan says so and cannot be
// carried out.
func TestClusterToken(t *testing.T) {
	first := &VM{Spec: Spec{Name: "srv1"}, Host: &remotetest.Host{HostName: "srv1", Files: map[string][]byte{ServerTokenPath: []byte(testToken + "\n")}}}
	joiner := &remotetest.Host{HostName: "srv2", Files: map[string][]byte{}}
	var redacted []string
	s := &ClusterToken{V: &VM{Spec: Spec{Name: "srv2"}, Host: joiner}, Seed: func() *VM { return first }, Redact: func(v ...string) { redacted = append(redacted, v...) }}
	p, err := s.Check(context.Background())
	if err != nil || len(p.Changes) != 1 {
		t.Fatalf("plan %+v, %v", p, err)
	}
	c := p.Changes[0]
	want := []effect.Effect{effect.Write{Host: "srv2", File: remote.File{Path: TokenPath, Content: []byte(testToken + "\n"), Mode: 0o600, Owner: "root:root", Sudo: true}}}
	if !reflect.DeepEqual(c.Effects, want) {
		t.Errorf("effects %+v", c.Effects)
	}
	if c.Diff != nil || strings.Contains(c.Summary, "K10") || strings.Join(redacted, ",") != testToken {
		t.Errorf("the token shows: summary %q, diff %v, redacted %v", c.Summary, c.Diff, redacted)
	}
	if err := step.CarryOut(context.Background(), s, p, steptest.Executor(nil, joiner)); err != nil || len(joiner.Wrote()) != 1 {
		t.Errorf("apply: %v, wrote %v", err, joiner.Wrote())
	}

	joiner.Files[TokenPath] = []byte(testToken + "\n")
	if p, err := s.Check(context.Background()); err != nil || !p.Empty() {
		t.Errorf("token in place: %+v, %v", p, err)
	}

	first = &VM{Spec: Spec{Name: "srv1"}, Host: &remotetest.Host{HostName: "srv1", Files: map[string][]byte{}}}
	delete(joiner.Files, TokenPath)
	p, err = s.Check(context.Background())
	if err != nil || len(p.Changes) != 1 || !strings.Contains(p.Changes[0].Summary, "once k3s runs there") {
		t.Fatalf("no token yet: %+v, %v", p, err)
	}
	var notYet *step.NotYetError
	if err := step.CarryOut(context.Background(), s, p, steptest.Executor(nil, joiner)); !errors.As(err, &notYet) || len(joiner.Wrote()) != 1 {
		t.Errorf("apply without a token: %v", err)
	}

	// The server that initialises the cluster has nothing to copy.
	s.V = first
	if p, err := s.Check(context.Background()); err != nil || !p.Empty() || !strings.Contains(p.Note, "initialises the cluster") {
		t.Errorf("seed server: %+v, %v", p, err)
	}
}

func TestJoinsCluster(t *testing.T) {
	if JoinsCluster(RenderConfig(Spec{})) || !JoinsCluster(RenderConfig(Spec{Join: "https://192.0.2.60:6443"})) || JoinsCluster(nil) {
		t.Error("JoinsCluster misreads the rendered configs")
	}
}

func TestQuorumGate(t *testing.T) {
	healthy := func(names ...string) []MemberHealth {
		var hs []MemberHealth
		for _, n := range names {
			hs = append(hs, MemberHealth{Name: n, OK: !strings.HasSuffix(n, "!"), Detail: "VM not reachable"})
		}
		for i := range hs {
			hs[i].Name = strings.TrimSuffix(hs[i].Name, "!")
		}
		return hs
	}
	for _, tc := range []struct {
		self    string
		members []MemberHealth
		want    string
	}{
		{"srv1", healthy("srv1", "srv2", "srv3"), ""},
		// The server to touch may be the unhealthy one: starting it
		// again costs no quorum.
		{"srv2", healthy("srv1", "srv2!", "srv3"), ""},
		{"srv1", healthy("srv1", "srv2", "srv3!"), "etcd member srv3 (VM not reachable) unhealthy: mgmtctl restarts or upgrades srv1 only while every other member is healthy"},
	} {
		err := QuorumGate(tc.self, tc.members)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: %v, want %q", tc.self, tc.members, err, tc.want)
		}
	}
}

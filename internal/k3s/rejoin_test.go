package k3s

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/remote/remotetest"
	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

// TestStop: k3s is stopped and masked for the restore unless systemd says
// it already is both.
func TestStop(t *testing.T) {
	for _, tc := range []struct {
		state, file string
		acts        bool
		summary     string
	}{
		{"active", "enabled", true, "stop k3s (active) and mask it until it rejoins"},
		{"activating", "enabled", true, "stop k3s (activating) and mask it until it rejoins"},
		{"activating", MaskedRuntime, true, "stop k3s (activating) and mask it until it rejoins"},
		{"inactive", "enabled", true, "mask k3s until it rejoins (k3s is inactive)"},
		{"failed", "disabled", true, "mask k3s until it rejoins (k3s is failed)"},
		{"inactive", MaskedRuntime, false, ""},
		{"failed", MaskedRuntime, false, ""},
	} {
		h := &remotetest.Host{HostName: "srv2", Answer: func(c remote.Cmd) (remote.Result, error) {
			if c.ReadOnly {
				return remote.Result{Stdout: []byte(tc.state + "\n" + tc.file + "\n")}, nil
			}
			return remote.Result{}, nil
		}}
		s := &Stop{V: &VM{Spec: Spec{Name: "srv2"}, Host: h}}
		p, err := s.Check(context.Background())
		if err != nil {
			t.Fatalf("%s/%s: %v", tc.state, tc.file, err)
		}
		if got := !p.Empty(); got != tc.acts || tc.acts && p.Changes[0].Summary != tc.summary {
			t.Errorf("%s/%s: plan %+v", tc.state, tc.file, p)
		}
		if tc.acts {
			if err := step.CarryOut(context.Background(), s, p, steptest.Executor(nil, h)); err != nil || len(h.Ran()) != 2 || !strings.HasSuffix(strings.Join(h.Ran()[1].Args, " "), stopScript+" sh "+RestoreLock) {
				t.Errorf("%s/%s: apply %v, ran %v", tc.state, tc.file, err, h.Effects())
			}
		}
	}
}

// TestRejoin: a peer that joins a cluster gets the backup's token in a
// root-only file (never in the summary) and its etcd data moved aside
// before k3s starts; one whose config.yaml would start a cluster of its
// own is refused before anything is touched.
func TestRejoin(t *testing.T) {
	joins := RenderConfig(Spec{Name: "srv2", Join: "https://192.0.2.60:6443"})
	h := &remotetest.Host{HostName: "srv2", Files: map[string][]byte{ConfigPath: joins}}
	s := &Rejoin{V: &VM{Spec: Spec{Name: "srv2"}, Host: h}, Token: []byte(testToken + "\n")}
	p, err := s.Check(context.Background())
	if err != nil || len(p.Changes) != 1 {
		t.Fatalf("plan %+v, %v", p, err)
	}
	c := p.Changes[0]
	if strings.Contains(c.Summary, "K10") || c.Diff != nil {
		t.Errorf("the token shows: %q", c.Summary)
	}
	w, ok := c.Effects[0].(effect.Write)
	if !ok || w.File.Path != TokenPath || string(w.File.Content) != testToken+"\n" || w.File.Mode != 0o600 || w.File.Owner != "root:root" {
		t.Errorf("token effect %+v", c.Effects[0])
	}
	run, ok := c.Effects[1].(effect.Run)
	argv := strings.Join(run.Cmd.Args, "\x00")
	if !ok || !run.Cmd.Sudo || !strings.Contains(argv, `mv -- "$1" "$1-before-restore-`) || !strings.HasSuffix(argv, "\x00"+DBDir+"\x00"+RestoreLock) || !strings.Contains(argv, "flock 9\n") ||
		strings.Index(argv, "mv --") > strings.Index(argv, "systemctl start k3s") {
		t.Errorf("rejoin effect %+v", c.Effects[1])
	}

	h.Files[ConfigPath] = RenderConfig(Spec{Name: "srv2"})
	if p, err := s.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "names no cluster to join") || !p.Empty() {
		t.Errorf("a config that initialises: %+v, %v", p, err)
	}
}

// TestMembers: the restore is done with every member healthy; an
// unhealthy one is named.
func TestMembers(t *testing.T) {
	hs := []MemberHealth{{Name: "srv1", OK: true}, {Name: "srv2", OK: true}, {Name: "srv3", Detail: "VM not reachable"}}
	s := &Members{Name: "srv1", Health: func(context.Context) ([]MemberHealth, error) { return hs, nil }}
	if _, err := s.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "etcd member srv3 (VM not reachable) unhealthy") {
		t.Errorf("one unhealthy: %v", err)
	}
	hs[2].OK = true
	if p, err := s.Check(context.Background()); err != nil || !p.Empty() || p.Note != "3 etcd members healthy: srv1, srv2, srv3" {
		t.Errorf("all healthy: %+v, %v", p, err)
	}
	boom := errors.New("boom")
	s.Health = func(context.Context) ([]MemberHealth, error) { return nil, boom }
	if _, err := s.Check(context.Background()); !errors.Is(err, boom) {
		t.Errorf("health unread: %v", err)
	}
}

// TestQuorumDecides: the gate passes with every other member healthy; a
// member that is down (k3s stopped, or its VM not reached) fails it at
// once, and so does any unhealthy member in a check run; one whose k3s
// runs is waited for only where the cluster can be watched.
func TestQuorumDecides(t *testing.T) {
	state := map[string]string{"srv2": "active\n", "srv3": "inactive\n"}
	vm := func(name string) *VM {
		return &VM{Spec: Spec{Name: name}, Host: &remotetest.Host{HostName: name, Answer: func(remote.Cmd) (remote.Result, error) {
			return remote.Result{Stdout: []byte(state[name])}, nil
		}}}
	}
	members := []*VM{vm("srv1"), vm("srv2"), vm("srv3")}
	health := func(bad ...string) func(context.Context) ([]MemberHealth, error) {
		return func(context.Context) ([]MemberHealth, error) {
			var hs []MemberHealth
			for _, v := range members {
				hs = append(hs, MemberHealth{Name: v.Name(), OK: !slices.Contains(bad, v.Name()), Detail: "etcd member not ready"})
			}
			return hs, nil
		}
	}
	apiAsked := false
	api := func(context.Context) (*kube.Reader, error) { apiAsked = true; return nil, nil }
	for _, tc := range []struct {
		name  string
		bad   []string
		bound time.Duration
		want  string // "" passes
		asks  bool   // the wait would watch the cluster
	}{
		{"all healthy", nil, 0, "", false},
		{"self unhealthy", []string{"srv1"}, 0, "", false},
		{"stopped member", []string{"srv3"}, 0, "etcd member srv3 (etcd member not ready) unhealthy", false},
		{"starting member, check run", []string{"srv2"}, -1, "etcd member srv2", false},
		{"starting member", []string{"srv2"}, 0, "etcd member srv2", true},
		{"starting and stopped", []string{"srv2", "srv3"}, 0, "srv2 (etcd member not ready), srv3", false},
	} {
		apiAsked = false
		err := Quorum{Self: "srv1", Members: members, Health: health(tc.bad...), API: api, Bound: tc.bound}.Check(context.Background())
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) || apiAsked != tc.asks {
			t.Errorf("%s: %v (watch asked for: %v)", tc.name, err, apiAsked)
		}
	}
}

// TestStaleNodes: the servers' Nodes (k3s's etcd role) the config does
// not have are deleted; the configured ones and an agent's stay.
func TestStaleNodes(t *testing.T) {
	var selector string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		selector = r.URL.Query().Get("labelSelector")
		w.Header().Set("Content-Type", "application/json")
		// The API server filters by the selector: only servers' Nodes.
		fmt.Fprint(w, `{"kind":"NodeList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"srv1"}},{"metadata":{"name":"srv2"}},{"metadata":{"name":"srv-old"}}]}`)
	}))
	defer srv.Close()
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n", srv.URL)
	var d net.Dialer
	r, err := kube.NewReader([]byte(kc), d.DialContext)
	if err != nil {
		t.Fatal(err)
	}
	s := &StaleNodes{Name: "srv1", Servers: []string{"srv1", "srv2"}, API: func(context.Context) (*kube.Reader, error) { return r, nil }}
	p, err := s.Check(context.Background())
	if err != nil || len(p.Changes) != 1 || selector != EtcdRoleLabel {
		t.Fatalf("plan %+v, %v (selector %q)", p, err, selector)
	}
	del, ok := p.Changes[0].Effects[0].(effect.Delete)
	if !ok || del.Object.Name != "srv-old" || del.Resource.Resource != "nodes" || p.Changes[0].Summary != "delete Node srv-old: a server the config does not have" {
		t.Errorf("change %+v", p.Changes[0])
	}
	s.Servers = append(s.Servers, "srv-old")
	if p, err := s.Check(context.Background()); err != nil || !p.Empty() {
		t.Errorf("all configured: %+v, %v", p, err)
	}
}

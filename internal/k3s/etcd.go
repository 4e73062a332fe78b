package k3s

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Member is one server as the etcd health check reaches it: its own API
// server, reached through its own VM, so the answer is its own etcd
// member's. The session builds API (a kube.Reader, which cannot write):
// a step holds no way to dial.
type Member struct {
	Name string
	API  func(ctx context.Context) (*kube.Reader, error)
}

// MemberHealth is one server's etcd member as its own API server sees it.
type MemberHealth struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// EtcdHealth asks each server's own API server for /readyz/etcd: k3s
// points a server's API server at its local etcd member, and the check
// reads through it, which needs the member up, joined and in a cluster
// with quorum.
func EtcdHealth(ctx context.Context, members []Member) []MemberHealth {
	out := make([]MemberHealth, len(members))
	for i, m := range members {
		out[i] = MemberHealth{Name: m.Name}
		cl, err := m.API(ctx)
		if err != nil {
			out[i].Detail = err.Error()
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		b, err := cl.GetPath(rctx, "/readyz/etcd")
		cancel()
		if err != nil {
			out[i].Detail = "etcd member not ready: " + strings.TrimSpace(firstLine(err.Error()))
			continue
		}
		out[i].OK, out[i].Detail = true, strings.TrimSpace(string(b))
	}
	return out
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// QuorumGate is the condition for touching (restarting, upgrading) one
// server of several: every other member healthy, so etcd keeps quorum
// without it. It returns an error naming the unhealthy ones.
func QuorumGate(self string, health []MemberHealth) error {
	var bad []string
	for _, h := range health {
		if h.Name != self && !h.OK {
			bad = append(bad, fmt.Sprintf("%s (%s)", h.Name, h.Detail))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("etcd member %s unhealthy: mgmtctl restarts or upgrades %s only while every other member is healthy, so that etcd keeps quorum without it; bring it back (mgmtctl apply starts a stopped VM) and run again",
		strings.Join(bad, ", "), self)
}

// QuorumWaitTimeout is the default bound of the gate's wait for a member
// that runs but is not healthy yet.
const QuorumWaitTimeout = 2 * time.Minute

// Quorum is the gate with its wait: it passes when every other member is
// healthy (QuorumGate). A member that is not healthy but whose k3s runs
// (systemd says active or activating: it started moments ago, in this run
// or just before, and its member is still joining or catching up) is
// waited for, up to Bound, the health read again at each change of the
// cluster's Nodes (a server's kubelet posts its status as it comes up).
// A member whose k3s does not run, or whose VM does not answer, has
// nothing to wait for: the gate fails at once, saying which.
type Quorum struct {
	Self    string
	Members []*VM // the servers k3s runs on, Self among them
	Health  func(ctx context.Context) ([]MemberHealth, error)
	API     func(ctx context.Context) (*kube.Reader, error)
	// Bound is the wait's; zero means QuorumWaitTimeout, and a negative
	// one (a check run, which must not wait) none.
	Bound time.Duration
}

// Check runs the gate.
func (q Quorum) Check(ctx context.Context) error {
	hs, err := q.Health(ctx)
	if err != nil || hs == nil {
		return err
	}
	gate := QuorumGate(q.Self, hs)
	if gate == nil || q.Bound < 0 {
		return gate
	}
	var starting []string
	for _, h := range hs {
		if h.Name == q.Self || h.OK {
			continue
		}
		if !q.runs(ctx, h.Name) {
			return gate
		}
		starting = append(starting, h.Name)
	}
	cl, err := q.API(ctx)
	if err != nil || cl == nil {
		return gate
	}
	bound := q.Bound
	if bound == 0 {
		bound = QuorumWaitTimeout
	}
	step.Progress(ctx, fmt.Sprintf("waiting for etcd member %s to become healthy (k3s runs there) before touching %s", strings.Join(starting, ", "), q.Self))
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	err = kube.Until(wctx, []kube.WatchFunc{func(ctx context.Context) (watch.Interface, error) {
		return cl.Nodes().Watch(ctx, metav1.ListOptions{})
	}}, func(ctx context.Context) (bool, error) {
		hs, err := q.Health(ctx)
		if err != nil {
			return false, err
		}
		gate = QuorumGate(q.Self, hs)
		return gate == nil, nil
	})
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		return step.Timeout(bound, wctx.Err(), "%v (waited %s for it)", gate, bound)
	}
	return err
}

// runs says k3s runs, or is starting, on the named member's VM.
func (q Quorum) runs(ctx context.Context, name string) bool {
	for _, v := range q.Members {
		if v.Name() != name || v.Host == nil {
			continue
		}
		state, err := v.serviceState(ctx)
		return err == nil && (state == "active" || state == "activating")
	}
	return false
}

package k3s

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/kube"
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

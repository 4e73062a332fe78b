// Package statuscheck holds what only `mgmtctl status` looks at, beside
// the phases' own steps, which health runs as a check run does: the
// laptop's kubeconfigs reach the API, the inspector's token and
// permissions, the etcd members of a cluster of servers. Each reads
// through a kube.Reader: status writes nothing.
package statuscheck

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mgmtctl/mgmtctl/internal/health"
	"github.com/mgmtctl/mgmtctl/internal/inspector"
	"github.com/mgmtctl/mgmtctl/internal/k3s"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/session"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Extras are the observations only `mgmtctl status` makes, by phase: the
// steps' own checks decide everything else. They run when their phase's
// steps are all as configured, straight from the laptop as kubectl would
// (so they also prove the laptop reaches the API).
func Extras(s *session.Session) map[step.Tag][]health.Check {
	c := &s.Config.Cluster
	apply := func(tag step.Tag) string { return "mgmtctl apply --tags " + string(tag) }
	adminPath := s.Config.KubeconfigPath()
	roPath := s.InspectorKubeconfigPath()
	extras := map[step.Tag][]health.Check{
		step.TagKubeconfig: {{Name: "admin-server", Run: func(ctx context.Context) health.Finding {
			cs, err := laptopReader(adminPath)
			if err != nil {
				return health.Bad(apply(step.TagKubeconfig), "%v", err)
			}
			ver, err := cs.ServerVersion()
			if err != nil {
				return health.Bad("check that the laptop reaches the VM on port 6443", "%s: server not reachable: %v", adminPath, err)
			}
			return health.Good("%s (0600): server answers (Kubernetes %s)", adminPath, ver.GitVersion)
		}}},
		step.TagInspector: {
			{Name: "inspector-token", Run: func(ctx context.Context) health.Finding {
				b, err := readPrivate(roPath)
				if err != nil {
					return health.Bad(apply(step.TagInspector), "%v", err)
				}
				kc, err := clientcmd.Load(b)
				if err != nil || kc.AuthInfos[c.Spec.Inspector.Name] == nil {
					return health.Bad(apply(step.TagInspector), "%s has no user %s", roPath, c.Spec.Inspector.Name)
				}
				exp, ok := inspector.TokenExpiry(kc.AuthInfos[c.Spec.Inspector.Name].Token)
				if !ok {
					return health.Bad(apply(step.TagInspector), "%s: the token has no expiry", roPath)
				}
				// Whether it is fresh enough is the inspector-kubeconfig
				// step's to decide; this says how long it lasts.
				return health.Good("%s (0600): token valid for %s more", roPath, time.Until(exp).Round(time.Minute))
			}},
			{Name: "inspector-permissions", Run: func(ctx context.Context) health.Finding {
				cs, err := laptopReader(roPath)
				if err != nil {
					return health.Bad(apply(step.TagInspector), "%v", err)
				}
				var wrong []string
				for _, want := range []struct {
					verb, resource string
					allowed        bool
				}{{"list", "pods", true}, {"get", "secrets", false}, {"create", "deployments", false}} {
					allowed, err := cs.CanI(ctx, want.verb, map[string]string{"deployments": "apps"}[want.resource], want.resource)
					if err != nil {
						return health.Bad("check that the laptop reaches the VM on port 6443", "SelfSubjectAccessReview: %v", err)
					}
					if allowed != want.allowed {
						wrong = append(wrong, fmt.Sprintf("%s %s allowed=%v", want.verb, want.resource, allowed))
					}
				}
				if len(wrong) > 0 {
					return health.Bad(apply(step.TagInspector), "inspector permissions wrong: %s", strings.Join(wrong, ", "))
				}
				return health.Good("can list pods; cannot get secrets; cannot create")
			}},
		},
	}
	if len(s.Config.Servers()) > 1 {
		a := s.Cluster()
		var all []string
		for _, srv := range s.Config.Servers() {
			all = append(all, srv.Name)
		}
		extras[step.TagK3s] = []health.Check{{Name: "etcd-members", Always: true, Run: func(ctx context.Context) health.Finding {
			return etcdFinding(ctx, a, s.Config.APIAddr(), all)
		}}}
	}
	if c.Spec.Backup.Schedule != "" {
		extras[step.TagK3s] = append(extras[step.TagK3s], health.Check{Name: "scheduled-snapshots", Run: func(ctx context.Context) health.Finding {
			return snapshotsCheck(ctx, s)
		}})
	}
	return extras
}

// etcdFinding is the servers' etcd members, each as its own API server
// sees it, and who holds the VIP: degraded (named) while one is down,
// even though the API still answers.
func etcdFinding(ctx context.Context, a *session.Cluster, vipAddr netip.Addr, members []string) health.Finding {
	hs, err := a.EtcdHealth(ctx, members)
	if err != nil {
		return health.Bad("mgmtctl apply", "no server's API reached: %v", err)
	}
	if hs == nil {
		return health.Bad("mgmtctl apply", "k3s does not run on any server yet")
	}
	var good, bad []string
	for _, h := range hs {
		if h.OK {
			good = append(good, h.Name)
		} else {
			bad = append(bad, fmt.Sprintf("%s: %s", h.Name, h.Detail))
		}
	}
	holder := "nobody"
	if a.Reader() != nil {
		if l, err := a.Reader().Leases("kube-system").Get(ctx, k3s.KubeVIPLease, metav1.GetOptions{}); err == nil && l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
	}
	vip := fmt.Sprintf("VIP %s held by %s", vipAddr, holder)
	if len(bad) == 0 {
		return health.Good("%d/%d members healthy (%s); %s", len(good), len(hs), strings.Join(good, ", "), vip)
	}
	quorum := "quorum kept"
	if len(good) <= len(hs)/2 {
		quorum = "NO QUORUM: the API cannot write"
	}
	return health.Bad("mgmtctl apply (it starts a stopped VM and waits for its server to rejoin)",
		"degraded, %d/%d members healthy, %s; %s; %s", len(good), len(hs), quorum, strings.Join(bad, "; "), vip)
}

// readPrivate reads a laptop file that must be private (0600).
func readPrivate(p string) ([]byte, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if fi.Mode().Perm() != 0o600 {
		return nil, fmt.Errorf("%s has mode %04o, not 0600", p, fi.Mode().Perm())
	}
	return os.ReadFile(p)
}

// laptopReader reads the cluster through a kubeconfig on the laptop,
// straight to its server, as kubectl would: a kube.Reader, so status holds
// nothing that writes, whatever the kubeconfig's user may do.
func laptopReader(p string) (*kube.Reader, error) {
	b, err := readPrivate(p)
	if err != nil {
		return nil, err
	}
	r, err := kube.NewReader(b, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return r, nil
}

package inspector

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/kubeconfig"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// KubeconfigFile keeps the inspector's kubeconfig on the laptop: the
// cluster's server and CA and a TokenRequest token of TTL, minted again
// only when the file is missing, points elsewhere, or its token has less
// than a quarter of TTL left.
type KubeconfigFile struct {
	Name, Path string
	TTL        time.Duration
	// Cluster returns the server, the CA and a client of the cluster, or
	// a nil client while the cluster does not exist (check mode).
	Cluster func() (server string, ca []byte, cs *kube.Reader, err error)
}

var _ step.Step = (*KubeconfigFile)(nil)

// ID implements step.Step.
func (s *KubeconfigFile) ID() string { return "inspector-kubeconfig" }

// Host implements step.Step.
func (s *KubeconfigFile) Host() string { return "laptop" }

// Check implements step.Step.
func (s *KubeconfigFile) Check(ctx context.Context) (step.Plan, error) {
	cur, action, err := kubeconfig.Current(s.Path)
	if err != nil {
		return step.Plan{}, err
	}
	server, ca, cs, err := s.Cluster()
	if err != nil {
		return step.Plan{}, err
	}
	if cs == nil {
		return step.Plan{Changes: []step.Change{{Target: s.Path, Action: action, Summary: fmt.Sprintf("%s %s (once k3s runs)", action, s.Path)}}}, nil
	}
	if cur != nil && Fresh(cur, s.Name, server, ca, s.TTL, time.Now()) && kubeconfig.Private(s.Path) {
		return step.Plan{Note: s.Path + " up to date"}, nil
	}
	return step.Plan{Changes: []step.Change{{Target: s.Path, Action: action,
		Summary: fmt.Sprintf("%s %s with a new %s token", action, s.Path, s.TTL),
		Effects: []effect.Effect{effect.TokenKubeconfig{ServiceAccount: types.NamespacedName{Namespace: Namespace, Name: s.Name},
			TTL: s.TTL, Name: s.Name, Server: server, CA: ca, Path: s.Path}}}}}, nil
}

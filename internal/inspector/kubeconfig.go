package inspector

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/mgmtctl/mgmtctl/internal/kubeconfig"
	"github.com/mgmtctl/mgmtctl/internal/localfile"
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
	Cluster func() (server string, ca []byte, cs kubernetes.Interface, err error)
	// Minted hears every token minted, for redaction.
	Minted func(token string)
}

// Mint is the payload of a KubeconfigFile's change: Apply mints a token of
// TTL and writes the kubeconfig around it; the token cannot exist before.
type Mint struct {
	TTL    time.Duration
	Server string
	CA     []byte
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
		Summary: fmt.Sprintf("%s %s with a new %s token", action, s.Path, s.TTL), Payload: Mint{TTL: s.TTL, Server: server, CA: ca}}}}, nil
}

// Apply implements step.Step: it mints the planned token and writes the
// kubeconfig around it.
func (s *KubeconfigFile) Apply(ctx context.Context, p step.Plan) error {
	m, ok := p.Changes[0].Payload.(Mint)
	if !ok {
		return fmt.Errorf("write %s: the cluster does not exist yet", s.Path)
	}
	_, _, cs, err := s.Cluster()
	if err != nil {
		return err
	}
	tok, err := MintToken(ctx, cs, s.Name, m.TTL)
	if err != nil {
		return err
	}
	if s.Minted != nil {
		s.Minted(tok)
	}
	b, err := Kubeconfig(s.Name, m.Server, m.CA, tok)
	if err != nil {
		return err
	}
	return localfile.Write(s.Path, b)
}

package k3s

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// NodeReadyTimeout bounds the wait for the node to become Ready.
const NodeReadyTimeout = 5 * time.Minute

// NodeReady waits, over the Kubernetes API through the SSH connection, until
// the node reports Ready.
type NodeReady struct{ V *VM }

var _ step.Step = (*NodeReady)(nil)

// ID implements step.Step.
func (s *NodeReady) ID() string { return "node-ready" }

// Host implements step.Step.
func (s *NodeReady) Host() string { return s.V.Name() }

func (s *NodeReady) plan(why string) step.Plan {
	return step.Plan{Changes: []step.Change{{Target: "node " + s.V.Name(), Action: step.Run,
		Summary: fmt.Sprintf("wait for node %s Ready (%s)", s.V.Name(), why)}}}
}

// Check implements step.Step. After the installer ran in this run it waits
// for the node here (waiting observes, it changes nothing), so an upgrade
// reports one change, the install, not two.
func (s *NodeReady) Check(ctx context.Context) (step.Plan, error) {
	if s.V.Host == nil || s.V.Installed == "" {
		return s.plan("k3s is not installed yet"), nil
	}
	if s.V.InstalledThisRun {
		if err := s.Apply(ctx, step.Plan{}); err != nil {
			return step.Plan{}, err
		}
		return step.Plan{Note: "node " + s.V.Name() + " is Ready after the install"}, nil
	}
	kc, err := s.V.ro().ReadFile(ctx, KubeconfigPath, true)
	if errors.Is(err, fs.ErrNotExist) {
		return s.plan("k3s has not written its kubeconfig yet"), nil
	}
	if err != nil {
		return step.Plan{}, err
	}
	cs, err := kube.NewClient(kc, s.V.Host.DialContext)
	if err != nil {
		return step.Plan{}, err
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, s.V.Name(), metav1GetOptions)
	if err != nil {
		return s.plan(err.Error()), nil
	}
	if ok, why := kube.NodeReady(n); !ok {
		return s.plan(why), nil
	}
	return step.Plan{Note: "node " + s.V.Name() + " is Ready"}, nil
}

// Apply implements step.Step.
func (s *NodeReady) Apply(ctx context.Context, p step.Plan) error {
	ctx, cancel := context.WithTimeout(ctx, NodeReadyTimeout)
	defer cancel()
	step.Progress(ctx, "waiting for node "+s.V.Name()+" to be Ready")
	// k3s writes k3s.yaml once its apiserver answers; the installer has
	// already waited for that (Type=notify), so one read normally does.
	kc, err := s.V.ro().ReadFile(ctx, KubeconfigPath, true)
	if err != nil {
		return fmt.Errorf("read %s on %s: %w", KubeconfigPath, s.V.Name(), err)
	}
	cs, err := kube.NewClient(kc, s.V.Host.DialContext)
	if err != nil {
		return err
	}
	return kube.WaitNodeReady(ctx, cs, s.V.Name())
}

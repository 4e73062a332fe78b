package k3s

import (
	"context"
	"fmt"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// NodeReadyTimeout bounds the wait for the node to become Ready.
const NodeReadyTimeout = 5 * time.Minute

// NodeReady waits, over the Kubernetes API through the SSH connection, until
// the node reports Ready.
type NodeReady struct {
	V *VM
	// API is the run's one way to the cluster; it returns a nil cluster
	// in check mode while k3s has not written its kubeconfig yet.
	API func(ctx context.Context) (*kube.Cluster, error)
}

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
	cl, err := s.API(ctx)
	if err != nil {
		return step.Plan{}, err
	}
	if cl == nil {
		return s.plan("k3s has not written its kubeconfig yet"), nil
	}
	cs := cl.Typed
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
	// already waited for that (Type=notify).
	cl, err := s.API(ctx)
	if err != nil {
		return fmt.Errorf("reach the API of k3s on %s: %w", s.V.Name(), err)
	}
	if cl == nil {
		return fmt.Errorf("%s does not exist on %s", KubeconfigPath, s.V.Name())
	}
	return kube.WaitNodeReady(ctx, cl.Typed, s.V.Name())
}

package k3s

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// NodeReadyTimeout is the default bound of the wait for the node to become
// Ready (after an install, an upgrade or a restart).
const NodeReadyTimeout = 5 * time.Minute

// NodeReady waits (a step.Waiter with nothing to change), over the
// Kubernetes API through the SSH connection, until the node reports Ready.
// It is the example of a pure wait: Check plans nothing, Observe looks
// once, Wait watches; the engine picks which.
type NodeReady struct {
	V *VM
	// API is the run's one way to the cluster; it returns a nil cluster
	// in check mode while k3s has not written its kubeconfig yet.
	API func(ctx context.Context) (*kube.Reader, error)
	// Timeout bounds the wait; zero means NodeReadyTimeout.
	Timeout time.Duration
}

var _ step.Waiter = (*NodeReady)(nil)

// ID implements step.Step.
func (s *NodeReady) ID() string { return "node-ready" }

// Host implements step.Step.
func (s *NodeReady) Host() string { return s.V.Name() }

// Check implements step.Step: a node's readiness is waited for, never
// changed.
func (s *NodeReady) Check(ctx context.Context) (step.Plan, error) {
	return step.Plan{Note: "node " + s.V.Name() + " is Ready"}, nil
}

// Observe implements step.Waiter.
func (s *NodeReady) Observe(ctx context.Context) (bool, string, error) {
	if s.V.Host == nil || s.V.Installed == "" {
		return false, "k3s is not installed yet", nil
	}
	cl, err := s.API(ctx)
	if err != nil {
		return false, "", err
	}
	if cl == nil {
		return false, "k3s has not written its kubeconfig yet", nil
	}
	n, err := cl.Nodes().Get(ctx, s.V.Name(), metav1GetOptions)
	if err != nil {
		return false, err.Error(), nil
	}
	ok, why := kube.NodeReady(n)
	return ok, why, nil
}

// Bound implements step.Waiter.
func (s *NodeReady) Bound() time.Duration {
	if s.Timeout <= 0 {
		return NodeReadyTimeout
	}
	return s.Timeout
}

// Wait implements step.Waiter.
func (s *NodeReady) Wait(ctx context.Context) error {
	// k3s writes k3s.yaml once its apiserver answers; the installer has
	// already waited for that (Type=notify).
	cl, err := s.API(ctx)
	if err != nil {
		return fmt.Errorf("reach the API of k3s: %w", err)
	}
	if cl == nil {
		return fmt.Errorf("%s does not exist: is k3s installed?", KubeconfigPath)
	}
	step.Progress(ctx, "waiting for node "+s.V.Name()+" to be Ready")
	err = kube.WaitNodeReady(ctx, cl, s.V.Name())
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w (after %s; on the VM, k3s's log says why: sudo journalctl -u k3s)", err, s.Bound())
	}
	return err
}

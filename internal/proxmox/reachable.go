package proxmox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// VMDialer connects to the VM. wait keeps trying (with bounded backoff)
// until the VM answers or ctx ends; without it one attempt is made.
type VMDialer func(ctx context.Context, wait bool) (remote.Host, error)

// Reachable waits until the VM answers SSH with its user's key and
// cloud-init is done: cloud-init still holding apt would break the k3s
// phase. It never depends on the guest agent, which the cloud image lacks.
type Reachable struct {
	N    *Node
	Dial VMDialer
}

var _ step.Waiter = (*Reachable)(nil)

// ID implements step.Step.
func (s *Reachable) ID() string { return "wait-ssh" }

// Host implements step.Step.
func (s *Reachable) Host() string { return s.N.Spec.Name }

func (s *Reachable) addr() string {
	return s.N.Spec.Net.Addr().String()
}

// Check implements step.Step: a VM answering is waited for, not made.
func (s *Reachable) Check(ctx context.Context) (step.Plan, error) {
	return step.Plan{Note: "SSH answers and cloud-init is done"}, nil
}

// Apply implements step.Step; the plan is always empty.
func (s *Reachable) Apply(ctx context.Context, p step.Plan) error { return nil }

// Observe implements step.Waiter: one connection attempt and one look at
// cloud-init.
func (s *Reachable) Observe(ctx context.Context) (bool, string, error) {
	if !s.N.Facts.VMExists || !s.N.Facts.Running {
		return false, "VM not running yet", nil
	}
	if s.N.Started {
		return false, "VM is booting", nil
	}
	h, err := s.Dial(ctx, false)
	var hk *remote.HostKeyError
	switch {
	case errors.As(err, &hk):
		return false, "", err
	case err != nil:
		return false, "not answering yet", nil
	}
	res, err := remote.ReadOnly(h).Run(ctx, remote.Query("cloud-init", "status"))
	if err != nil {
		return false, "", fmt.Errorf("cloud-init status: %w", err)
	}
	if out := strings.TrimSpace(string(res.Stdout)); !strings.HasSuffix(out, "status: done") {
		return false, "cloud-init " + strings.TrimPrefix(lastLine(out), "status: "), nil
	}
	return true, "", nil
}

func lastLine(s string) string {
	lines := strings.Split(s, "\n")
	return lines[len(lines)-1]
}

// Wait implements step.Waiter: it knocks until the VM answers SSH, then
// waits for cloud-init to finish.
func (s *Reachable) Wait(ctx context.Context) error {
	step.Progress(ctx, "waiting for SSH on "+s.addr()+":22")
	h, err := s.Dial(ctx, true)
	if err != nil {
		return err
	}
	step.Progress(ctx, "waiting for cloud-init to finish")
	res, err := h.Run(ctx, remote.Query("cloud-init", "status", "--wait"))
	if err != nil {
		return fmt.Errorf("wait for cloud-init: %w", err)
	}
	if out := strings.TrimSpace(string(res.Stdout)); !strings.HasSuffix(out, "status: done") {
		return fmt.Errorf("cloud-init did not finish cleanly: %s (see /var/log/cloud-init.log on the VM)", lastLine(out))
	}
	return nil
}

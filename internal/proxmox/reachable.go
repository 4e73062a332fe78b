package proxmox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// BootTimeout is the default bound of the wait for a VM to answer SSH and
// finish cloud-init. The cloud image boots and runs cloud-init in well
// under a minute on any Proxmox host; five minutes leaves room for a slow
// disk without leaving a failed boot unnoticed for long.
const BootTimeout = 5 * time.Minute

// VMDialer connects to the VM. wait keeps trying (with bounded backoff)
// until the VM answers or ctx ends; without it one attempt is made.
type VMDialer func(ctx context.Context, wait bool) (remote.Reader, error)

// Reachable waits until the VM answers SSH with its user's key and
// cloud-init is done: cloud-init still holding apt would break the k3s
// phase. It never depends on the guest agent, which the cloud image lacks.
//
// A VM mgmtctl created and never reached, that a run already waited for
// in vain since it booted (or that has run longer than the bound), and
// that still does not answer never booted (a hung guest, a boot that failed while its cause
// was there): it holds nothing, so the step resets it (qm reset) and waits
// again. That is how a plain re-run recovers once the cause is gone. A VM
// that answered before is never reset: it may hold the cluster, and a
// network fault is no reason to reboot it.
type Reachable struct {
	N    *Node
	Dial VMDialer
	// Record is the laptop's record of a VM mgmtctl created and never
	// reached; nil: none is kept, and no VM is ever reset.
	Record NewVMRecord
	// Timeout bounds the wait; zero means BootTimeout.
	Timeout time.Duration
}

// NewVMRecord is what the laptop remembers of a VM mgmtctl created: that
// it has never answered SSH yet (its host key is still to be learned), and
// when a run last waited for it to the end of its bound (ok false: never).
// A step only reads it: the session writes the "gave up" line when a wait
// fails with a *NeverAnsweredError (the run's record, outside the plans).
type NewVMRecord interface {
	NeverReached() bool
	GaveUpAt() (at time.Time, ok bool)
}

// NeverAnsweredError is wait-ssh running out of its bound on a running VM
// mgmtctl created and never reached: the session records it for the next
// run, which resets the VM (Reachable.Check).
type NeverAnsweredError struct {
	VMID string
	Err  error // what the wait last saw, with where to look
}

func (e *NeverAnsweredError) Error() string { return e.Err.Error() }
func (e *NeverAnsweredError) Unwrap() error { return e.Err }

var (
	_ step.Waiter   = (*Reachable)(nil)
	_ step.Finisher = (*Reachable)(nil)
)

// ID implements step.Step.
func (s *Reachable) ID() string { return "wait-ssh" }

// Host implements step.Step.
func (s *Reachable) Host() string { return s.N.Spec.Name }

func (s *Reachable) addr() string {
	return s.N.Spec.Net.Addr().String()
}

// Bound implements step.Waiter.
func (s *Reachable) Bound() time.Duration {
	if s.Timeout <= 0 {
		return BootTimeout
	}
	return s.Timeout
}

// Check implements step.Step: a VM answering is waited for, not made;
// only a VM that never booted is reset.
func (s *Reachable) Check(ctx context.Context) (step.Plan, error) {
	ok := step.Plan{Note: "SSH answers and cloud-init is done"}
	f := s.N.Facts
	if !f.VMExists || !f.Running || s.Record == nil || !s.Record.NeverReached() {
		return ok, nil
	}
	// Only a VM a run gave up on since it booted, or that has had its boot
	// time: one started since a run gave up (this run's start-vm, or by
	// hand) is booting, not hung.
	gaveUp, recorded := s.Record.GaveUpAt()
	if !(recorded && gaveUp.After(f.BootedAt())) && f.Uptime < s.Bound() {
		return ok, nil
	}
	// If it answers now, it was only slow.
	_, err := s.Dial(ctx, false)
	var hk *remote.HostKeyError
	switch {
	case err == nil:
		return ok, nil
	case errors.As(err, &hk):
		return step.Plan{}, err
	}
	id := s.N.VMID()
	return step.Plan{Changes: []step.Change{{Target: "VM " + id, Action: step.Run,
		Summary: fmt.Sprintf("reset VM %s: up %s, it never answered SSH since mgmtctl created it (%v)", id, f.Uptime, rootCause(err)),
		Effects: []effect.Effect{s.N.do(remote.Command("qm", "reset", id), "POST", s.N.vmPath()+"/status/reset", nil)}}}}, nil
}

// Finish implements step.Finisher: the reset VM boots again, which the
// wait that follows sees.
func (s *Reachable) Finish(ctx context.Context, out []remote.Result, err error) error {
	if err != nil {
		return fmt.Errorf("reset VM %s: %w", s.N.VMID(), err)
	}
	return nil
}

// Observe implements step.Waiter: one connection attempt and one look at
// cloud-init.
func (s *Reachable) Observe(ctx context.Context) (bool, string, error) {
	if !s.N.Facts.VMExists || !s.N.Facts.Running {
		return false, "VM not running yet", nil
	}
	h, err := s.Dial(ctx, false)
	var hk *remote.HostKeyError
	switch {
	case errors.As(err, &hk):
		return false, "", err
	case err != nil:
		return false, "not answering yet", nil
	}
	res, err := h.Look(ctx, remote.CloudInitStatus())
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
	var hk *remote.HostKeyError
	if err != nil && !errors.As(err, &hk) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		if s.Record != nil && s.Record.NeverReached() {
			return &NeverAnsweredError{VMID: s.N.VMID(), Err: s.neverAnswered(err)}
		}
		return s.neverAnswered(err)
	}
	if err != nil {
		return err
	}
	step.Progress(ctx, "waiting for cloud-init to finish")
	res, err := h.Look(ctx, remote.CloudInitWait())
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return step.Timeout(s.Bound(), ctx.Err(), "cloud-init on VM %s still running after %s: read /var/log/cloud-init.log on the VM (or its console: qm terminal %s on %s)",
			s.N.VMID(), s.Bound(), s.N.VMID(), s.N.Name())
	}
	if err != nil {
		return fmt.Errorf("wait for cloud-init: %w", err)
	}
	if out := strings.TrimSpace(string(res.Stdout)); !strings.HasSuffix(out, "status: done") {
		return fmt.Errorf("cloud-init did not finish cleanly: %s (see /var/log/cloud-init.log on the VM)", lastLine(out))
	}
	return nil
}

// neverAnswered is the error of a VM still silent at the wait's bound: what
// was last seen, where to look, and what the next run will do. It wraps
// the connection error, so the run exits as for any unreachable host.
func (s *Reachable) neverAnswered(err error) error {
	id, node := s.N.VMID(), s.N.Name()
	next := fmt.Sprintf("if it hangs, reset it (qm reset %s on %s) and run apply again", id, node)
	if s.Record != nil && s.Record.NeverReached() {
		next = fmt.Sprintf("mgmtctl created it and never reached it, so the next apply resets it (qm reset %s): run it once the cause is gone", id)
	}
	return fmt.Errorf("VM %s is running but did not answer SSH on %s:22 within %s: %w; its console shows why (qm terminal %s on %s, serial0); %s",
		id, s.addr(), s.Bound(), err, id, node, next)
}

// rootCause is the innermost error, for a one-line summary.
func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

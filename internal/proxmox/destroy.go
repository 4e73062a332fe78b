package proxmox

import (
	"context"
	"fmt"
	"net/url"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// ForeignVMError is a VM at the configured VMID that mgmtctl did not
// create: its name or its tag differ. Nothing is ever done to it.
type ForeignVMError struct {
	VMID       int
	Node       string
	Name, Tags string
}

func (e *ForeignVMError) Error() string {
	return fmt.Sprintf("VM %d on %s is not mgmtctl's (name %q, tags %q; mgmtctl's VMs carry the cluster's name and the tag %q): refusing to touch it; nothing was removed",
		e.VMID, e.Node, e.Name, e.Tags, ManagedTag)
}

// DestroyVM stops the VM and destroys it with its disks, when mgmtctl
// created it (its name and tag say so, as CreateVM set them). A VM that
// does not exist is already destroyed.
type DestroyVM struct{ N *Node }

var _ step.Finisher = (*DestroyVM)(nil)

// ID implements step.Step.
func (s *DestroyVM) ID() string { return "destroy-vm" }

// Host implements step.Step.
func (s *DestroyVM) Host() string { return s.N.Name() }

// Check implements step.Step.
func (s *DestroyVM) Check(ctx context.Context) (step.Plan, error) {
	f, id := s.N.Facts, s.N.VMID()
	if !f.VMExists {
		return step.Plan{Note: "VM " + id + " does not exist"}, nil
	}
	if f.OnNode != "" && f.OnNode != s.N.Spec.Node {
		return step.Plan{}, fmt.Errorf("VM %s (name %q) is on node %s, not on %s as the config says: refusing to touch it; nothing was removed", id, f.Config["name"], f.OnNode, s.N.Spec.Node)
	}
	if !s.N.Ours() {
		return step.Plan{}, &ForeignVMError{VMID: s.N.Spec.VMID, Node: s.N.Name(), Name: f.Config["name"], Tags: f.Config["tags"]}
	}
	var cmds []effect.Effect
	if f.Running {
		// A hard stop: the VM is going away with its disks.
		cmds = append(cmds, s.N.do(remote.Command("qm", "stop", id), "POST", s.N.vmPath()+"/status/stop", nil))
	}
	cmds = append(cmds, s.N.do(remote.Command("qm", "destroy", id, "--purge"), "DELETE", s.N.vmPath(),
		url.Values{"purge": {"1"}, "destroy-unreferenced-disks": {"1"}}))
	return step.Plan{Changes: []step.Change{{Target: "VM " + id, Action: step.Delete,
		Summary: fmt.Sprintf("destroy VM %s (%s) on %s with its disks", id, f.Config["name"], s.N.Name()), Effects: cmds}}}, nil
}

// Finish implements step.Finisher.
func (s *DestroyVM) Finish(ctx context.Context, out []remote.Result, err error) error {
	if err != nil {
		return fmt.Errorf("destroy VM %s: %w", s.N.VMID(), err)
	}
	return nil
}

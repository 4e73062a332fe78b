package phase

import (
	"context"

	"github.com/mgmtctl/mgmtctl/internal/laptop"
	"github.com/mgmtctl/mgmtctl/internal/proxmox"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// InspectorKubeconfigPath is where the inspector's kubeconfig lands.
func (s *Session) InspectorKubeconfigPath() string {
	return s.Config.Env.Expand("~/.kube/" + s.Config.Cluster.Spec.Inspector.Name + ".kubeconfig")
}

// Destroy is the destroy command's one phase: the VM mgmtctl created,
// with its disks, then what the laptop keeps of it. The VM goes first: a
// VM that is not mgmtctl's fails the phase before any laptop file is
// touched. The cloud image and the Proxmox API token stay.
func Destroy(s *Session) step.Phase {
	n := &proxmox.Node{Spec: vmSpec(&s.Config.Cluster)}
	return step.Phase{
		Tag: step.TagDestroy,
		Prepare: func(ctx context.Context) (string, error) {
			return n.Name(), gatherNode(ctx, s, n)
		},
		Steps: []step.Step{
			&proxmox.DestroyVM{N: n},
			&laptop.RemoveFile{StepID: "admin-kubeconfig", Path: s.Config.KubeconfigPath(), What: "the admin kubeconfig"},
			&laptop.RemoveFile{StepID: "inspector-kubeconfig", Path: s.InspectorKubeconfigPath(), What: "the inspector kubeconfig"},
			&laptop.ForgetHostKey{StepID: "vm-host-key", File: s.VMKnownHosts(), Addr: s.VMTarget().Addr},
			&laptop.RemoveFile{StepID: "new-vm-record", Path: s.newVMMarker(), What: "mgmtctl's record of the VM it created"},
		},
	}
}

package phase

import (
	"context"

	"github.com/mgmtctl/mgmtctl/internal/laptop"
	"github.com/mgmtctl/mgmtctl/internal/proxmox"
	"github.com/mgmtctl/mgmtctl/internal/session"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Destroy is the destroy command's one phase: the VM mgmtctl created,
// with its disks, then what the laptop keeps of it. The VM goes first: a
// VM that is not mgmtctl's fails the phase before any laptop file is
// touched. The cloud image and the Proxmox API token stay.
func Destroy(s *session.Session) step.Phase {
	servers := s.Config.Servers()
	nodes := make([]*proxmox.Node, len(servers))
	var steps, laptopSteps []step.Step
	for i, srv := range servers {
		nodes[i] = &proxmox.Node{Spec: vmSpec(&s.Config.Cluster, srv)}
		steps = append(steps, &proxmox.DestroyVM{N: nodes[i]})
		laptopSteps = append(laptopSteps,
			&laptop.ForgetHostKey{StepID: "vm-host-key", File: s.VMKnownHosts(), Addr: s.VMTarget(srv).Addr},
			&laptop.RemoveFile{StepID: "new-vm-record", Path: s.NewVMMarker(srv), What: "mgmtctl's record of the VM it created"})
	}
	steps = append(steps,
		&laptop.RemoveFile{StepID: "admin-kubeconfig", Path: s.Config.KubeconfigPath(), What: "the admin kubeconfig"},
		&laptop.RemoveFile{StepID: "inspector-kubeconfig", Path: s.InspectorKubeconfigPath(), What: "the inspector kubeconfig"})
	return step.Phase{
		Tag: step.TagDestroy,
		Prepare: func(ctx context.Context) (string, error) {
			// Every VM is looked at before any goes: one that is not
			// mgmtctl's fails the phase before anything is removed.
			if err := checkAPIAccess(ctx, s); err != nil {
				return servers[0].Node, err
			}
			for i, srv := range servers {
				n := nodes[i]
				if err := gatherNode(ctx, s, srv, n); err != nil {
					return n.Name(), err
				}
				if f := n.Facts; f.VMExists && !n.Ours() {
					return n.Name(), &proxmox.ForeignVMError{VMID: n.Spec.VMID, Node: n.Name(), Name: f.Config["name"], Tags: f.Config["tags"]}
				}
			}
			return nodes[0].Name(), nil
		},
		Steps: append(steps, laptopSteps...),
	}
}

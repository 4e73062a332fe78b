package phase

import (
	"context"
	"errors"

	"github.com/mgmtctl/mgmtctl/internal/k3s"
	"github.com/mgmtctl/mgmtctl/internal/proxmox"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Build returns every phase in run order.
func Build(s *Session) []step.Phase {
	return []step.Phase{
		vmPhase(s),
		k3sPhase(s),
		notYet(step.TagAddons, s.Config.Cluster.Metadata.Name),
		notYet(step.TagCAPI, s.Config.Cluster.Metadata.Name),
		notYet(step.TagKubeconfig, "laptop"),
		notYet(step.TagInspector, s.Config.Cluster.Metadata.Name),
	}
}

func vmPhase(s *Session) step.Phase {
	n := &proxmox.Node{Cluster: &s.Config.Cluster}
	dial := func(ctx context.Context, wait bool) (remote.Host, error) {
		return s.DialVM(ctx, n.Created, wait, func(msg string) { step.Progress(ctx, msg) })
	}
	return step.Phase{
		Tag: step.TagVM,
		Prepare: func(ctx context.Context) (string, error) {
			h, err := s.Host(ctx, s.ProxmoxTarget())
			if err != nil {
				return n.Name(), err
			}
			n.Host = h
			return n.Name(), n.Gather(ctx)
		},
		Steps: []step.Step{
			&proxmox.Image{N: n},
			&proxmox.CreateVM{N: n, AuthorizedKey: s.Config.AuthorizedKey, BeforeCreate: s.MarkNewVM},
			&proxmox.GrowDisk{N: n},
			&proxmox.StartVM{N: n},
			&proxmox.Reachable{N: n, Dial: dial},
		},
	}
}

func k3sPhase(s *Session) step.Phase {
	c := &s.Config.Cluster
	v := &k3s.VM{Cluster: c}
	ready := &k3s.NodeReady{V: v}
	check := &k3s.HostKeyCheck{Name: c.Spec.Proxmox.Node, VMID: c.Spec.VM.ID, Pinned: s.VMHostKey}
	return step.Phase{
		Tag: step.TagK3s,
		Prepare: func(ctx context.Context) (string, error) {
			pve, err := s.Host(ctx, s.ProxmoxTarget())
			if err != nil {
				return c.Spec.Proxmox.Node, err
			}
			check.Node = pve
			h, err := s.DialVM(ctx, false, false, nil)
			if err != nil {
				if s.Check && remote.IsUnreachable(err) && !isHostKeyErr(err) {
					// A check run before the VM exists: every step is pending.
					return v.Name(), v.Gather(ctx)
				}
				return v.Name(), err
			}
			v.Host = h
			return v.Name(), v.Gather(ctx)
		},
		Steps: []step.Step{
			&k3s.GuestAgent{V: v},
			check,
			&k3s.Config{V: v},
			&k3s.Install{V: v},
			ready,
		},
		Handlers: []step.Step{&k3s.Restart{V: v, Ready: ready}},
	}
}

func isHostKeyErr(err error) bool {
	var hk *remote.HostKeyError
	return errors.As(err, &hk)
}

func notYet(tag step.Tag, host string) step.Phase {
	return step.Phase{Tag: tag, Prepare: func(context.Context) (string, error) {
		return host, errNotImplemented(string(tag))
	}}
}

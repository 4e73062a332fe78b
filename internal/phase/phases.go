package phase

import (
	"context"

	"github.com/mgmtctl/mgmtctl/internal/proxmox"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Build returns every phase in run order.
func Build(s *Session) []step.Phase {
	return []step.Phase{
		vmPhase(s),
		notYet(step.TagK3s, s.Config.Cluster.Metadata.Name),
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

func notYet(tag step.Tag, host string) step.Phase {
	return step.Phase{Tag: tag, Prepare: func(context.Context) (string, error) {
		return host, errNotImplemented(string(tag))
	}}
}

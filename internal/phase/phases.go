package phase

import (
	"context"

	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Build returns every phase in run order.
func Build(s *Session) []step.Phase {
	return []step.Phase{
		{Tag: step.TagVM, Prepare: func(ctx context.Context) (string, error) {
			t := s.ProxmoxTarget()
			if _, err := s.Host(ctx, t); err != nil {
				return t.Name, err
			}
			// Connected, host key verified and locked: the vm phase's
			// steps come next (issue 4).
			return t.Name, errNotImplemented(string(step.TagVM))
		}},
		notYet(step.TagK3s, s.Config.Cluster.Metadata.Name),
		notYet(step.TagAddons, s.Config.Cluster.Metadata.Name),
		notYet(step.TagCAPI, s.Config.Cluster.Metadata.Name),
		notYet(step.TagKubeconfig, "laptop"),
		notYet(step.TagInspector, s.Config.Cluster.Metadata.Name),
	}
}

func notYet(tag step.Tag, host string) step.Phase {
	return step.Phase{Tag: tag, Prepare: func(context.Context) (string, error) {
		return host, errNotImplemented(string(tag))
	}}
}

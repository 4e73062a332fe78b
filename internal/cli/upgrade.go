package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mgmtctl/mgmtctl/internal/phase"
	"github.com/mgmtctl/mgmtctl/internal/preflight"
	"github.com/mgmtctl/mgmtctl/internal/upgrade"
)

func newUpgrade(g *global, o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "What a bump of the pins will do",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "plan",
		Short: "Show, for each component, the version running, pinned and newest in its line, and what apply will do",
		Long: "upgrade plan reads what each component runs (the image on the nodes, k3s on every server,\n" +
			"kube-vip, the cert-manager and cluster-api-operator Helm releases, each provider's installed\n" +
			"version), what mgmt.yaml pins, and the newest release of each pin's line (k3s's update\n" +
			"channel, the charts' repositories, the providers' GitHub releases). It says what apply will\n" +
			"do, in apply's order; what a k3s bump does (one server at a time behind the quorum gate,\n" +
			"one minor version at a time: a downgrade or a skipped minor is refused); and whether the\n" +
			"pinned providers' contracts agree, as clusterctl checks them. It changes nothing.\n" +
			"Edit the pins in mgmt.yaml, run it again, then apply. -o json for scripts. Exit 0 when apply\n" +
			"can take every pin, 1 when it would refuse one (or the plan could not be read), 2 for\n" +
			"invalid config or usage, 4 when a host cannot be reached or its host key is refused.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := newRun(g, o)
			if err != nil {
				return err
			}
			r.s.ReadOnly = true
			if err := r.open(); err != nil {
				return err
			}
			defer r.close()
			p, err := phase.UpgradePlan(cmd.Context(), r.s, &preflight.Released{Cache: preflight.CacheFile(r.o.CacheDir)})
			if err != nil {
				return r.fail(err)
			}
			write := upgrade.WriteText
			if g.output == "json" {
				write = upgrade.WriteJSON
			}
			if err := write(o.Out, p); err != nil {
				return err
			}
			// A pin apply would refuse is a failure a script sees in the
			// exit code, not only in the table.
			if n := p.Refusals(); n > 0 {
				return r.fail(fmt.Errorf("apply would refuse %d of these pins (refused above): change them in mgmt.yaml before apply", n))
			}
			return nil
		},
	})
	return cmd
}

package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mgmtctl/mgmtctl/internal/pveaccess"
	"github.com/mgmtctl/mgmtctl/internal/remote"
)

func newProxmox(g *global, o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "proxmox",
		Short: "Proxmox VE access: the roles and ACLs the API tokens need",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newProxmoxRole(g, o))
	return cmd
}

func newProxmoxRole(g *global, o *Options) *cobra.Command {
	var version int
	cmd := &cobra.Command{
		Use:   "role",
		Short: "Print the pveum commands that give CAPMOX's token exactly the privileges it needs",
		Long: "role prints, for the config's token (spec.proxmox.tokenID), the pveum commands that make\n" +
			"one role per path with exactly the privileges CAPMOX needs (CAPMOX's least privileges, on\n" +
			"the config's storage and bridge), the user, a token with privilege separation, and the ACLs\n" +
			"for both. The privileges are those of the node's Proxmox VE major version: read from the\n" +
			"first node with pveversion over SSH, or given with --pve-version. It changes nothing; run\n" +
			"the commands on a node as root. apply checks the token against the same list and names\n" +
			"each privilege missing, before anything is written.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if version != 0 && (version < pveaccess.Versions[0] || version > pveaccess.Versions[len(pveaccess.Versions)-1]) {
				return usageError{fmt.Errorf("--pve-version must be 8 or 9, got %d", version)}
			}
			r, err := newRun(g, o)
			if err != nil {
				return err
			}
			running := ""
			if version == 0 {
				if err := r.open(); err != nil {
					return err
				}
				defer r.close()
				srv := r.l.Servers()[0]
				h, err := r.s.Host(cmd.Context(), r.s.ProxmoxTarget(srv))
				if err != nil {
					return r.fail(fmt.Errorf("read the Proxmox VE version on %s (or pass --pve-version): %w", srv.Node, err))
				}
				res, err := h.Look(cmd.Context(), remote.PVEVersion())
				if err != nil {
					return r.fail(fmt.Errorf("pveversion on %s (or pass --pve-version): %w", srv.Node, err))
				}
				running = parsePVEVersion(string(res.Stdout))
				known, ok := pveaccess.Known(pveaccess.Major(running))
				if !ok {
					return r.fail(fmt.Errorf("%s runs Proxmox VE %q: mgmtctl knows the privileges of PVE 8 and 9", srv.Node, running))
				}
				version = known
			}
			spec := r.l.Cluster.Spec
			grants := pveaccess.CAPMOX(version, spec.Proxmox.Storage, spec.VM.Bridge)
			cmds, err := pveaccess.Commands(grants, spec.Proxmox.TokenID)
			if err != nil {
				return err
			}
			if g.output == "json" {
				type grant struct {
					Path      string   `json:"path"`
					Role      string   `json:"role"`
					Privs     []string `json:"privileges"`
					Propagate bool     `json:"propagate"`
				}
				var gs []grant
				for _, gr := range grants {
					gs = append(gs, grant{gr.Path, gr.Role.Name, gr.Role.Privs, gr.Propagate})
				}
				enc := json.NewEncoder(o.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					For        string   `json:"for"`
					TokenID    string   `json:"tokenID"`
					PVEVersion int      `json:"pveVersion"`
					Grants     []grant  `json:"grants"`
					Commands   []string `json:"commands"`
				}{"CAPMOX", spec.Proxmox.TokenID, version, gs, cmds})
			}
			on := fmt.Sprintf("Proxmox VE %d", version)
			if running != "" {
				on = fmt.Sprintf("Proxmox VE %s", running)
			}
			fmt.Fprintf(o.Out, "# CAPMOX's token %s on %s: exactly what CAPMOX needs (its least privileges),\n", spec.Proxmox.TokenID, on)
			fmt.Fprintf(o.Out, "# on storage %s and bridge %s. Run on a node as root; `pveum user token add` prints the\n", spec.Proxmox.Storage, spec.VM.Bridge)
			fmt.Fprintf(o.Out, "# secret once: put it in secrets.yaml as proxmox.tokenSecret.\n")
			fmt.Fprintln(o.Out, strings.Join(cmds, "\n"))
			return nil
		},
	}
	cmd.Flags().IntVar(&version, "pve-version", 0, "the nodes' Proxmox VE major version, 8 or 9 (default: read on the first node)")
	return cmd
}

// parsePVEVersion reads pveversion's "pve-manager/9.2.11/14a22df3
// (running kernel: ...)": the version.
func parsePVEVersion(out string) string {
	rest, ok := strings.CutPrefix(strings.TrimSpace(out), "pve-manager/")
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, "/")
	return v
}

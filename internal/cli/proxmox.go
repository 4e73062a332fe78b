package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mgmtctl/mgmtctl/internal/phase"
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
	var forWhom string
	cmd := &cobra.Command{
		Use:   "role",
		Short: "Print the pveum commands that give a token exactly the privileges it needs",
		Long: "role prints the pveum commands that make one role per path with exactly the privileges a\n" +
			"token needs, the user, a token with privilege separation, and the ACLs for both:\n" +
			"  --for capmox (the default): CAPMOX's token (spec.proxmox.tokenID), CAPMOX's least\n" +
			"    privileges on the config's storage and bridge;\n" +
			"  --for mgmtctl: mgmtctl's own token (spec.proxmox.mgmtctlTokenID) for the vm phase through\n" +
			"    the API (spec.proxmox.access: api): its VMs' paths only, the storages, the nodes' network\n" +
			"    access for the image's download, and the bridge.\n" +
			"The privileges are those of the nodes' Proxmox VE major version: read from the first node\n" +
			"(pveversion over SSH, or the API in api access), or given with --pve-version. It changes\n" +
			"nothing; run the commands on a node as root. apply checks each token against the same list\n" +
			"and names each privilege missing, before anything is written.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if version != 0 && (version < pveaccess.Versions[0] || version > pveaccess.Versions[len(pveaccess.Versions)-1]) {
				return usageError{fmt.Errorf("--pve-version must be 8 or 9, got %d", version)}
			}
			if forWhom != "capmox" && forWhom != "mgmtctl" {
				return usageError{fmt.Errorf("--for must be capmox or mgmtctl, got %q", forWhom)}
			}
			r, err := newRun(g, o)
			if err != nil {
				return err
			}
			// It only reads the nodes' version: no run lock, so it works
			// while an apply runs.
			r.s.ReadOnly = true
			spec := r.l.Cluster.Spec
			if forWhom == "mgmtctl" && spec.Proxmox.MgmtctlTokenID == "" {
				return usageError{fmt.Errorf("--for mgmtctl needs spec.proxmox.mgmtctlTokenID (with spec.proxmox.access: api): the token to make")}
			}
			running := ""
			if version == 0 {
				if running, err = readPVEVersion(cmd.Context(), r); err != nil {
					return err
				}
				known, ok := pveaccess.Known(pveaccess.Major(running))
				if !ok {
					return r.fail(fmt.Errorf("the nodes run Proxmox VE %q: mgmtctl knows the privileges of PVE 8 and 9", running))
				}
				version = known
			}
			grants := pveaccess.CAPMOX(version, spec.Proxmox.Storage, spec.Proxmox.ISOStorage, spec.VM.Bridge, spec.Proxmox.Pool)
			tokenID, who, secretAt := spec.Proxmox.TokenID, "CAPMOX", "proxmox.tokenSecret"
			if forWhom == "mgmtctl" {
				grants = phase.MgmtctlGrants(r.l, version)
				tokenID, who, secretAt = spec.Proxmox.MgmtctlTokenID, "mgmtctl", "proxmox.mgmtctlTokenSecret"
			}
			cmds, err := pveaccess.Commands(grants, tokenID)
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
				}{who, tokenID, version, gs, cmds})
			}
			on := fmt.Sprintf("Proxmox VE %d", version)
			if running != "" {
				on = fmt.Sprintf("Proxmox VE %s", running)
			}
			if forWhom == "mgmtctl" {
				fmt.Fprintf(o.Out, "# mgmtctl's token %s on %s: exactly what the vm phase needs through the API,\n", tokenID, on)
				fmt.Fprintf(o.Out, "# on its VMs only, storages %s and %s, and bridge %s.", spec.Proxmox.Storage, spec.Proxmox.ImageStorage, spec.VM.Bridge)
			} else {
				px := spec.Proxmox
				fmt.Fprintf(o.Out, "# CAPMOX's token %s on %s: each privilege one that a call of CAPMOX v0.9\n", tokenID, on)
				fmt.Fprintf(o.Out, "# is checked for (docs/upstream.md §1.12), on disk storage %s, ISO storage %s and bridge %s,", px.Storage, px.ISOStorage, spec.VM.Bridge)
				if px.Pool != "" {
					fmt.Fprintf(o.Out, "\n# and on the VMs of pool %s only: put the machine templates in it (pveum pool modify %s --vms ID)\n# and set spec.pool: %s in the ProxmoxMachineTemplates.", px.Pool, px.Pool, px.Pool)
				} else {
					fmt.Fprintf(o.Out, "\n# and on every VM (/vms): spec.proxmox.pool keeps it to one pool's.")
				}
			}
			fmt.Fprintf(o.Out, " Run on a node as root; `pveum user token add` prints the\n# secret once: put it in secrets.yaml as %s.\n", secretAt)
			fmt.Fprintln(o.Out, strings.Join(cmds, "\n"))
			return nil
		},
	}
	cmd.Flags().IntVar(&version, "pve-version", 0, "the nodes' Proxmox VE major version, 8 or 9 (default: read on the first node)")
	cmd.Flags().StringVar(&forWhom, "for", "capmox", "whose token: capmox, or mgmtctl (the vm phase through the API)")
	return cmd
}

// readPVEVersion reads the Proxmox VE version the nodes run: over SSH
// (pveversion on the first node), or through the API in api access,
// with mgmtctl's token (which must exist by then).
func readPVEVersion(ctx context.Context, r *run) (string, error) {
	srv := r.l.Servers()[0]
	if r.l.Cluster.Spec.Proxmox.API() {
		if r.l.Secrets.Proxmox.MgmtctlTokenSecret == "" {
			return "", usageError{fmt.Errorf("mgmtctl's token has no secret yet (proxmox.mgmtctlTokenSecret) to read the nodes' version with: pass --pve-version")}
		}
		if err := r.open(); err != nil {
			return "", err
		}
		defer r.close()
		v, err := r.s.ProxmoxAPI().Version(ctx)
		if err != nil {
			return "", r.fail(fmt.Errorf("read the Proxmox VE version through the API (or pass --pve-version): %w", err))
		}
		return v, nil
	}
	if err := r.open(); err != nil {
		return "", err
	}
	defer r.close()
	h, err := r.s.Host(ctx, r.s.ProxmoxTarget(srv))
	if err != nil {
		return "", r.fail(fmt.Errorf("read the Proxmox VE version on %s (or pass --pve-version): %w", srv.Node, err))
	}
	res, err := h.Look(ctx, remote.PVEVersion())
	if err != nil {
		return "", r.fail(fmt.Errorf("pveversion on %s (or pass --pve-version): %w", srv.Node, err))
	}
	return parsePVEVersion(string(res.Stdout)), nil
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

package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/engine"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

func newDestroy(g *global, o *Options) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "destroy",
		Short: "Remove the VM mgmtctl created and the laptop's kubeconfigs for it (asks first)",
		Long: "destroy lists what it will remove: the VM (only if mgmtctl created it: its name is the\n" +
			"cluster's and it carries the mgmtctl tag), the admin and inspector kubeconfigs, the VM's\n" +
			"known_hosts entry. It asks for the cluster's name to confirm (or --yes), then stops and\n" +
			"destroys the VM with its disks: exactly what it listed. If that changed while it asked,\n" +
			"it shows the difference and removes nothing. The cloud image and the Proxmox API token stay.\n" +
			"A second destroy finds nothing to remove and exits 0.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDestroy(cmd.Context(), g, o, yes)
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	return cmd
}

func runDestroy(ctx context.Context, g *global, o *Options, yes bool) error {
	d, err := openRun(g, o)
	if err != nil {
		return err
	}
	defer d.close()
	l := d.l
	phases := []step.Phase{o.Destroy(d.s)}

	// First what would be removed, under the node's lock, which the real
	// run keeps: nobody changes the VM between the question and the act.
	listed := &engine.Listed{}
	if _, err := engine.Run(ctx, phases, engine.Options{Check: true, Now: o.Now}, engine.Listeners{d.log, listed}); err != nil {
		return d.fail(err)
	}
	info := d.info()
	changes := listed.Changes()
	if len(changes) == 0 {
		fmt.Fprintf(info, "nothing to destroy: %s does not exist and no laptop file of %s is left\n",
			vmsOn(l.Servers()), l.Cluster.Metadata.Name)
		return nil
	}
	fmt.Fprintf(info, "destroy will remove:\n")
	for _, c := range changes {
		fmt.Fprintf(info, "  - %s\n", d.x.String(strings.TrimPrefix(c.Summary, "remove ")))
	}
	var nodes []string
	for _, srv := range l.Servers() {
		nodes = append(nodes, srv.Node)
	}
	fmt.Fprintf(info, "It leaves the cloud image on %s and the Proxmox API token alone.\n", strings.Join(nodes, ", "))
	if !d.confirm(yes, "destroy it") {
		return exitError(ExitFailed)
	}
	// The world may have moved while the question was open: look again,
	// and remove nothing unless it is still exactly what was listed.
	again := &engine.Listed{}
	if _, err := engine.Run(ctx, phases, engine.Options{Check: true, Now: o.Now}, engine.Listeners{d.log, again}); err != nil {
		return d.fail(err)
	}
	if diff := listed.Diff(again); diff != "" {
		fmt.Fprintf(o.Err, "error: what destroy would remove changed since it was listed; nothing was removed:\n%s\nrun destroy again to see the new list\n", d.x.String(diff))
		return reported{errors.New("destroy: the plan changed after it was listed")}
	}
	// The run carries out the listed plans, each step refusing if its own
	// is not the one listed.
	if _, err := engine.Run(ctx, phases, engine.Options{Now: o.Now, Listed: listed, Exec: o.Exec(d.s)}, d.listeners(false)); err != nil {
		return d.fail(err)
	}
	return nil
}

// readLine reads one line of the answer; a closed or empty input is no
// answer.
func readLine(in io.Reader) string {
	if in == nil {
		return ""
	}
	line, _ := bufio.NewReader(in).ReadString('\n')
	return strings.TrimSpace(line)
}

// vmsOn names the servers' VMs: "VM 110 on pve" for one, "VMs 110 on
// pve1, 111 on pve2, …" for several.
func vmsOn(servers []config.Server) string {
	var parts []string
	for _, srv := range servers {
		parts = append(parts, fmt.Sprintf("%d on %s", srv.ID, srv.Node))
	}
	if len(parts) == 1 {
		return "VM " + parts[0]
	}
	return "VMs " + strings.Join(parts, ", ")
}

package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mgmtctl/mgmtctl/internal/backup"
	"github.com/mgmtctl/mgmtctl/internal/engine"
	"github.com/mgmtctl/mgmtctl/internal/phase"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

func newBackup(g *global, o *Options) *cobra.Command {
	var to string
	var keep int
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Copy an etcd snapshot of the management cluster to this laptop",
		Long: "backup saves an etcd snapshot on the VM (k3s etcd-snapshot save) and copies it to a new\n" +
			"directory on the laptop with its sha256, the server token a restore needs (0600, never\n" +
			"printed), the config and the pins it was taken with; the server's copy is then deleted.\n" +
			"The newest --keep backups are kept. Default directory: ~/.local/share/mgmtctl/backups/<name>.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keep < 1 {
				return usageError{fmt.Errorf("--keep must be at least 1, got %d", keep)}
			}
			d, err := openRun(g, o)
			if err != nil {
				return err
			}
			defer d.close()
			dir := to
			if dir == "" {
				dir = d.s.BackupDir()
			}
			raw, err := os.ReadFile(d.l.Path)
			if err != nil {
				return err
			}
			if _, err := engine.Run(cmd.Context(), []step.Phase{phase.Backup(d.s, dir, keep, raw, o.Now)}, engine.Options{Now: o.Now, Exec: o.Exec(d.s)}, d.listeners(false)); err != nil {
				return d.fail(err)
			}
			if list, err := backup.List(dir); err == nil && len(list) > 0 && g.output != "json" {
				fmt.Fprintf(o.Out, "backup: %s\n", list[0].Dir)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "directory of this cluster's backups (default ~/.local/share/mgmtctl/backups/<name>)")
	cmd.Flags().IntVar(&keep, "keep", 5, "keep the newest N backups, remove older ones")
	return cmd
}

func newRestore(g *global, o *Options) *cobra.Command {
	var from string
	var yes, pinsOK bool
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Put a backup's etcd snapshot back on the management cluster (asks first)",
		Long: "restore checks the backup's sha256 and pins before touching anything, asks for the\n" +
			"cluster's name (or --yes), restores the snapshot with k3s's cluster reset under the\n" +
			"backup's server token, then converges every phase after vm and waits until the\n" +
			"providers are Ready. Everything the cluster got after the backup is lost.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" {
				return usageError{fmt.Errorf("restore needs --from DIR (a backup directory)")}
			}
			return runRestore(cmd.Context(), g, o, from, yes, pinsOK)
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the backup directory to restore")
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&pinsOK, "allow-pin-mismatch", false, "restore although the backup was taken with other pins than the config's")
	return cmd
}

func runRestore(ctx context.Context, g *global, o *Options, from string, yes, pinsOK bool) error {
	d, err := openRun(g, o)
	if err != nil {
		return err
	}
	defer d.close()
	// Everything that can refuse the backup does so before any connection.
	if n := len(d.l.Servers()); n > 1 {
		// Restoring one server of several needs the others wiped and
		// rejoined (k3s's cluster-reset procedure): not built yet.
		return d.fail(fmt.Errorf("restore of a cluster of %d servers is not supported in this version: restore needs one server (k3s's cluster-reset restores on one, and the others must be wiped and rejoin); nothing was touched", n))
	}
	b, err := backup.Read(from)
	if err != nil {
		return d.fail(err)
	}
	if b.Cluster != d.l.Cluster.Metadata.Name {
		return d.fail(fmt.Errorf("backup %s is of cluster %s, the config's is %s", from, b.Cluster, d.l.Cluster.Metadata.Name))
	}
	snap, token, err := b.Load()
	if err != nil {
		return d.fail(err)
	}
	d.x.Add(string(token))
	if diff := backup.PinDiff(b.Pins, phase.Pins(&d.l.Cluster)); len(diff) > 0 && !pinsOK {
		return d.fail(fmt.Errorf("the backup was taken with other pins than the config's:\n  %s\nset the config's pins to the backup's, or pass --allow-pin-mismatch (the phases after the restore then move the cluster to the config's pins)",
			strings.Join(diff, "\n  ")))
	}
	fmt.Fprintf(d.info(), "restore will replace the state of %s (VM %d at %s) with snapshot %s, taken %s; what the cluster got since is lost\n",
		d.l.Cluster.Metadata.Name, d.l.Servers()[0].ID, d.l.Servers()[0].Net.Addr(), b.Snapshot, b.Created.Format("2006-01-02 15:04:05 MST"))
	if !d.confirm(yes, "restore it") {
		return exitError(ExitFailed)
	}
	if _, err := engine.Run(ctx, phase.Restore(d.s, b, snap, token), engine.Options{Now: o.Now, Exec: o.Exec(d.s)}, d.listeners(false)); err != nil {
		return d.fail(err)
	}
	return nil
}

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mgmtctl/mgmtctl/internal/backup"
	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/engine"
	"github.com/mgmtctl/mgmtctl/internal/phase"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

func newBackup(g *global, o *Options) *cobra.Command {
	var to string
	var keep int
	var list bool
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Copy an etcd snapshot of the management cluster to this laptop",
		Long: "backup saves an etcd snapshot on the VM (k3s etcd-snapshot save) and copies it to a new\n" +
			"directory on the laptop with its sha256, the server token a restore needs (0600, never\n" +
			"printed), the config and the pins it was taken with; the server's copy is then deleted.\n" +
			"The newest --keep backups are kept. Default directory: ~/.local/share/mgmtctl/backups/<name>.\n" +
			"With --list it lists the backups, newest first: the laptop's and, with spec.backup.s3, the\n" +
			"bucket's snapshots as k3s on the first server lists them (the only connection it opens).",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keep < 1 {
				return usageError{fmt.Errorf("--keep must be at least 1, got %d", keep)}
			}
			if list {
				return listBackups(cmd.Context(), g, o, to)
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
	cmd.Flags().BoolVar(&list, "list", false, "list the backups (newest first) with their age, and take none")
	return cmd
}

// listedBackup is one backup as backup --list -o json gives it.
type listedBackup struct {
	Where    string            `json:"where"` // "laptop" or "s3"
	Dir      string            `json:"dir,omitempty"`
	Location string            `json:"location,omitempty"` // s3://bucket/key
	Created  time.Time         `json:"created"`
	AgeSecs  int64             `json:"ageSeconds"`
	Snapshot string            `json:"snapshot"`
	Size     int64             `json:"size"`
	SHA256   string            `json:"sha256"`
	Pins     map[string]string `json:"pins"`
	Reason   string            `json:"reason,omitempty"`
	// Cluster is, for a snapshot in S3, the id of the cluster whose
	// folder holds it, or "before per-cluster folders".
	Cluster string `json:"cluster,omitempty"`
}

// listBackups prints the cluster's backups in dir (the default
// directory when empty), newest first: a table, or JSON for scripts.
func listBackups(ctx context.Context, g *global, o *Options, dir string) error {
	r, err := newRun(g, o)
	if err != nil {
		return err
	}
	// It only reads: no host's run lock, so it works while an apply runs.
	r.s.ReadOnly = true
	if dir == "" {
		dir = r.s.BackupDir()
	}
	all, err := backup.List(dir)
	if err != nil {
		return r.fail(fmt.Errorf("list the backups in %s: %w", dir, err))
	}
	now := o.Now()
	listed := make([]listedBackup, 0, len(all))
	for _, b := range all {
		listed = append(listed, listedBackup{Where: "laptop", Dir: b.Dir, Created: b.Created, AgeSecs: int64(now.Sub(b.Created) / time.Second),
			Snapshot: b.Snapshot, Size: b.Size, SHA256: b.SHA256, Pins: b.Pins, Reason: b.Reason})
	}
	if r.l.Cluster.Spec.Backup.S3 != nil {
		if err := r.open(); err != nil {
			return err
		}
		defer r.close()
		inS3, err := s3Snapshots(ctx, r)
		if err != nil {
			return r.fail(fmt.Errorf("list the snapshots in spec.backup.s3's bucket: %w", err))
		}
		for _, sn := range inS3 {
			cluster := sn.Cluster
			if cluster == "" {
				cluster = "before per-cluster folders"
			}
			listed = append(listed, listedBackup{Where: "s3", Location: sn.Location, Created: sn.Created, AgeSecs: int64(now.Sub(sn.Created) / time.Second),
				Snapshot: sn.Name, Size: sn.Size, Reason: "scheduled by k3s", Cluster: cluster})
		}
		sort.SliceStable(listed, func(i, j int) bool { return listed[i].Created.After(listed[j].Created) })
	}
	if g.output == "json" {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(listed)
	}
	if len(listed) == 0 {
		fmt.Fprintf(o.Out, "no backups in %s (mgmtctl backup takes one)\n", dir)
		return nil
	}
	tw := tabwriter.NewWriter(o.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WHERE\tBACKUP\tAGE\tSIZE\tK3S\tCLUSTER\tTAKEN")
	for _, b := range listed {
		why := b.Reason
		if why == "" {
			why = "by mgmtctl backup"
		}
		name, k3sPin, cluster := b.Dir, b.Pins["k3s"], "-"
		if b.Where == "s3" {
			// What restore --from takes; the cluster that uploaded it
			// (its folder's id).
			name, k3sPin, cluster = "s3:"+b.Snapshot, "-", b.Cluster
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f MiB\t%s\t%s\t%s\n", b.Where, name, age(now.Sub(b.Created)), float64(b.Size)/(1<<20), k3sPin, cluster, why)
	}
	return tw.Flush()
}

// s3Snapshots lists the bucket's snapshots under spec.backup.s3.folder
// as k3s on the first server lists them (backup.ListBucket).
func s3Snapshots(ctx context.Context, r *run) ([]backup.InBucket, error) {
	srv := r.l.Servers()[0]
	h, err := r.s.DialVM(ctx, srv, false, nil)
	if err != nil {
		return nil, err
	}
	b := r.l.Cluster.Spec.Backup.S3
	out, err := backup.ListBucket(ctx, h, b.Bucket, b.Folder)
	if err != nil {
		return nil, fmt.Errorf("k3s etcd-snapshot ls on %s: %w", srv.Name, err)
	}
	return out, nil
}

// age is a duration as a listing shows it: its largest unit.
func age(d time.Duration) string {
	switch {
	case d < 0: // a backup dated ahead of this laptop's clock
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

func newRestore(g *global, o *Options) *cobra.Command {
	var from string
	var yes, pinsOK, resume bool
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Put a backup's etcd snapshot back on the management cluster (asks first)",
		Long: "restore checks the backup's sha256 and pins before touching anything, asks for the\n" +
			"cluster's name (or --yes), restores the snapshot with k3s's cluster reset under the\n" +
			"backup's server token, then converges every phase after vm and waits until the\n" +
			"providers are Ready. With several servers, k3s stops on all of them, the first\n" +
			"restores the snapshot, and the others move their etcd data aside and rejoin it, one\n" +
			"at a time. Everything the cluster got after the backup is lost; a restore cut short\n" +
			"is redone by running it again.\n\n" +
			"A backup pauses every Cluster API Cluster for its snapshot, so a restored cluster's\n" +
			"Clusters wake up paused and stay held so: check them, then resume them with\n" +
			"restore --resume.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if resume {
				if from != "" {
					return usageError{fmt.Errorf("--resume resumes the Clusters a restore holds paused: run it alone, once you have checked the restored cluster")}
				}
				d, err := openRun(g, o)
				if err != nil {
					return err
				}
				defer d.close()
				if _, err := engine.Run(cmd.Context(), []step.Phase{phase.Resume(d.s)}, engine.Options{Now: o.Now, Exec: o.Exec(d.s)}, d.listeners(false)); err != nil {
					return d.fail(err)
				}
				return nil
			}
			if from == "" {
				return usageError{fmt.Errorf("restore needs --from DIR (a backup directory) or --from s3:NAME (a snapshot in spec.backup.s3's bucket), or --resume")}
			}
			if name, ok := strings.CutPrefix(from, "s3:"); ok {
				return runRestoreS3(cmd.Context(), g, o, name, yes)
			}
			return runRestore(cmd.Context(), g, o, from, yes, pinsOK)
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the backup directory to restore, or s3:NAME for a snapshot in spec.backup.s3's bucket (backup --list names them)")
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&resume, "resume", false, "resume the Cluster API Clusters a restore holds paused (and any a backup left paused)")
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
	var vms []string
	for _, srv := range d.l.Servers() {
		vms = append(vms, fmt.Sprintf("VM %d at %s", srv.ID, srv.Net.Addr()))
	}
	fmt.Fprintf(d.info(), "restore will replace the state of %s (%s) with snapshot %s, taken %s; what the cluster got since is lost\n",
		d.l.Cluster.Metadata.Name, strings.Join(vms, ", "), b.Snapshot, b.Created.Format("2006-01-02 15:04:05 MST"))
	if !d.confirm(yes, "restore it") {
		return exitError(ExitFailed)
	}
	if _, err := engine.Run(ctx, phase.Restore(d.s, b, snap, token), engine.Options{Now: o.Now, Exec: o.Exec(d.s)}, d.listeners(false)); err != nil {
		return d.fail(err)
	}
	return nil
}

// runRestoreS3 restores the bucket's snapshot name onto the cluster that
// took it, under the cluster's own token. The snapshot carries no
// manifest: no pins to compare, so the phases after the restore move the
// cluster to the config's.
func runRestoreS3(ctx context.Context, g *global, o *Options, name string, yes bool) error {
	// Refused before any connection or log.
	if !snapshotName.MatchString(name) {
		return usageError{fmt.Errorf("--from s3:%s: a snapshot name is letters, digits and ._- (backup --list names them)", name)}
	}
	d, err := newRun(g, o)
	if err != nil {
		return err
	}
	b := d.l.Cluster.Spec.Backup.S3
	if b == nil {
		return printConfigErrors(o, config.Errors{{File: d.l.Path, Path: "spec.backup.s3", Msg: "is not set: restore --from s3:" + name + " needs the bucket k3s keeps its snapshots in"}})
	}
	if err := d.open(); err != nil {
		return err
	}
	defer d.close()
	fmt.Fprintf(d.info(), "restore will replace the state of %s with snapshot %s from s3://%s/%s; what the cluster got since is lost\n",
		d.l.Cluster.Metadata.Name, name, b.Bucket, path.Join(b.Folder, name))
	if !d.confirm(yes, "restore it") {
		return exitError(ExitFailed)
	}
	if _, err := engine.Run(ctx, phase.Restore(d.s, backup.Backup{S3: name}, nil, nil), engine.Options{Now: o.Now, Exec: o.Exec(d.s)}, d.listeners(false)); err != nil {
		return d.fail(err)
	}
	return nil
}

// snapshotName is a k3s snapshot's name: <name>-<node>-<unix time>.
var snapshotName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

package backup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// VM is the k3s server a backup is taken on or restored to.
type VM struct {
	Name string
	Host remote.Reader
}

// conn is the name of the connection to the server (for a plan's
// effects): the VM the run reached.
func (v *VM) conn() string {
	if v.Host == nil {
		return v.Name
	}
	return v.Host.Name()
}

// Take is one backup run: where it goes and what it records. Save fills
// the snapshot's name for Fetch.
type Take struct {
	V *VM
	// Dir is the cluster's backup directory; each backup is a directory
	// in it named after its time.
	Dir      string
	Manifest Manifest // Cluster and Pins set by the caller
	Config   []byte   // mgmt.yaml as it was
	Now      func() time.Time
	// Before, when set, makes the backup apply's, taken only before a
	// risky change: it says which (the Manifest's Reason), or "" for
	// none, and then nothing is saved.
	Before   *Before
	snapshot string
}

// Before is the decision to take a backup before a change: Reason is
// asked once, the first time a step needs it, and kept for the others
// (the pause, the save, the resume decide alike).
type Before struct {
	Reason func(ctx context.Context) (string, error)
	asked  bool
	reason string
}

// Applies says a backup is taken (there is a reason): the
// step.Conditional of apply's backup steps.
func (b *Before) Applies(ctx context.Context) (bool, error) {
	reason, err := b.Get(ctx)
	return reason != "", err
}

// Get is the reason, "" for none.
func (b *Before) Get(ctx context.Context) (string, error) {
	if b == nil {
		return "", nil
	}
	if !b.asked {
		r, err := b.Reason(ctx)
		if err != nil {
			return "", err
		}
		b.asked, b.reason = true, r
	}
	return b.reason, nil
}

// Save takes an on-demand etcd snapshot on the server. It is the
// laptop's: --etcd-s3=false keeps it out of spec.backup.s3's bucket (whose
// snapshots are k3s's scheduled ones), and Fetch's delete then removes
// only the server's copy. A flag on the command line wins over
// config.yaml's etcd-s3 (k3s pkg/configfilearg).
type Save struct{ T *Take }

var _ step.Finisher = (*Save)(nil)

// ID implements step.Step.
func (s *Save) ID() string { return "etcd-snapshot" }

// Host implements step.Step.
func (s *Save) Host() string { return s.T.V.Name }

// Check implements step.Step: a backup is always a new snapshot; apply's
// only before a risky change.
func (s *Save) Check(ctx context.Context) (step.Plan, error) {
	summary := "save an etcd snapshot of " + s.T.V.Name
	if s.T.Before != nil {
		reason, err := s.T.Before.Get(ctx)
		if err != nil {
			return step.Plan{}, err
		}
		if reason == "" {
			return step.Plan{Skip: "no risky change: no snapshot before it"}, nil
		}
		s.T.Manifest.Reason = reason
		summary += " " + reason + " (--no-snapshot skips it)"
	}
	return step.Plan{Changes: []step.Change{{Target: SnapshotDir, Action: step.Create,
		Summary: summary,
		Effects: []effect.Effect{effect.Run{Host: s.T.V.conn(), Cmd: remote.Command("k3s", "etcd-snapshot", "save", "--etcd-s3=false", "--name", SnapshotName).AsRoot()}}}}}, nil
}

var savedRE = regexp.MustCompile(`Snapshot (\S+) saved\.`)

// etcdDisabled reports whether k3s refused to snapshot because its
// datastore is SQLite: k3s etcd-snapshot exits 1 with
// `level=fatal msg="Error: see server log for details: etcd datastore
// disabled"` (docs.k3s.io cli/etcd-snapshot; the lab's k3s says the same).
// k3s's stderr is all a caller has to tell this failure from another.
func etcdDisabled(err error) bool {
	var ee *remote.ExitError
	return errors.As(err, &ee) && strings.Contains(ee.Stderr, "etcd datastore disabled")
}

// Finish implements step.Finisher: k3s names the snapshot it saved in its
// log (stderr), and Fetch copies that one.
func (s *Save) Finish(ctx context.Context, out []remote.Result, err error) error {
	if etcdDisabled(err) {
		return fmt.Errorf("k3s on %s keeps its data in SQLite, which k3s cannot snapshot: run mgmtctl apply first (it turns on embedded etcd, cluster-init: true, which k3s converts to on restart): %w", s.T.V.Name, err)
	}
	if err != nil {
		return fmt.Errorf("k3s etcd-snapshot save: %w", err)
	}
	res := out[0]
	m := savedRE.FindSubmatch(append(res.Stderr, res.Stdout...))
	if m == nil {
		return fmt.Errorf("k3s etcd-snapshot save did not name the snapshot it saved: %q", string(res.Stderr))
	}
	s.T.snapshot = string(m[1])
	return nil
}

// Fetch copies the snapshot and the server token to a new backup
// directory on the laptop, then deletes the snapshot on the server (the
// laptop's copy is the backup; on-demand snapshots are never pruned by k3s).
type Fetch struct{ T *Take }

var _ step.Finisher = (*Fetch)(nil)

// ID implements step.Step.
func (s *Fetch) ID() string { return "copy" }

// Host implements step.Step.
func (s *Fetch) Host() string { return s.T.V.Name }

// Check implements step.Step. The snapshot's sha256 and size are read on
// the server, so the plan holds the whole backup directory: the snapshot
// (its copy checked against that sha256), its checksum file, the token,
// mgmt.yaml, and backup.json last (a directory without one is an
// interrupted backup, which List skips); then the server's copy goes.
func (s *Fetch) Check(ctx context.Context) (step.Plan, error) {
	if s.T.snapshot == "" {
		return step.Plan{Skip: "no snapshot was saved"}, nil
	}
	now := s.T.Now().UTC()
	dir := filepath.Join(s.T.Dir, now.Format("20060102T150405Z"))
	for n, base := 2, dir; exists(dir); n++ {
		dir = fmt.Sprintf("%s-%d", base, n) // two backups in one second
	}
	snap := path.Join(SnapshotDir, s.T.snapshot)
	res, err := s.T.V.Host.Look(ctx, remote.FileSHA256AndSize(snap).AsRoot())
	if err != nil {
		return step.Plan{}, fmt.Errorf("read the sha256 of %s: %w", snap, err)
	}
	var sum string
	var size int64
	if _, err := fmt.Sscan(string(res.Stdout), &sum, &size); err != nil || len(sum) != 64 {
		return step.Plan{}, fmt.Errorf("read the sha256 of %s: %q", snap, res.Stdout)
	}
	m := s.T.Manifest
	m.Created, m.Snapshot, m.SHA256, m.Size = now, s.T.snapshot, sum, size
	man, err := manifestBytes(m)
	if err != nil {
		return step.Plan{}, err
	}
	host := s.T.V.conn()
	del := remote.Command("k3s", "etcd-snapshot", "delete", "--etcd-s3=false", s.T.snapshot).AsRoot()
	effects := [copyEffects]effect.Effect{
		effect.Download{Host: host, Path: snap, Sudo: true, To: filepath.Join(dir, snapshotFile), SHA256: sum},
		effect.WriteLocal{Path: filepath.Join(dir, sumFile), Content: sumLine(sum)},
		effect.Download{Host: host, Path: TokenPath, Sudo: true, To: filepath.Join(dir, tokenFile)},
		effect.WriteLocal{Path: filepath.Join(dir, configFile), Content: s.T.Config},
		effect.WriteLocal{Path: filepath.Join(dir, manifestFile), Content: man},
		effect.Run{Host: host, Cmd: del},
	}
	return step.Plan{Changes: []step.Change{{Target: dir, Action: step.Create,
		Summary: fmt.Sprintf("copy %s (%.1f MiB) and the server token %s to %s (snapshot, token, mgmt.yaml, backup.json; 0600); then %s on the server",
			snap, float64(size)/(1<<20), TokenPath, dir, del.Display()), Effects: effects[:]}}}, nil
}

// copyEffects is how many effects a backup's copy has, the server-side
// delete last.
const copyEffects = 6

// Finish implements step.Finisher: a failure after the backup is complete
// says where it is.
func (s *Fetch) Finish(ctx context.Context, out []remote.Result, err error) error {
	// Every effect attempted: the one that failed is the delete, the last.
	if err != nil && len(out) == copyEffects {
		return fmt.Errorf("the backup is complete; deleting the server's copy failed: %w", err)
	}
	return err
}

// Prune keeps the newest Keep backups in Dir.
type Prune struct {
	Dir  string
	Keep int
}

var _ step.Step = (*Prune)(nil)

// ID implements step.Step.
func (s *Prune) ID() string { return "prune" }

// Host implements step.Step.
func (s *Prune) Host() string { return "laptop" }

// Check implements step.Step.
func (s *Prune) Check(ctx context.Context) (step.Plan, error) {
	all, err := List(s.Dir)
	if err != nil {
		return step.Plan{}, err
	}
	if len(all) <= s.Keep {
		return step.Plan{Note: fmt.Sprintf("%d backup(s) in %s, keeping up to %d", len(all), s.Dir, s.Keep)}, nil
	}
	var p step.Plan
	for _, b := range all[s.Keep:] {
		p.Changes = append(p.Changes, step.Change{Target: b.Dir, Action: step.Delete,
			Summary: fmt.Sprintf("remove backup %s (keeping the newest %d)", b.Dir, s.Keep), Effects: []effect.Effect{effect.RemoveLocal{Path: b.Dir, Tree: true}}})
	}
	return p, nil
}

// Restore puts a backup's snapshot back on the server with k3s's cluster
// reset: k3s stops, the current etcd data is moved aside, the snapshot is
// restored under the backup's server token (which decrypts the cluster's
// CAs in it), and k3s starts again from it. With B.S3 set, the snapshot
// is that one in spec.backup.s3's bucket, which k3s downloads itself, and
// Token is the cluster's own (the phase reads it on the server).
type Restore struct {
	V        *VM
	B        Backup
	Snapshot []byte
	Token    []byte
	// Bucket and Folder are spec.backup.s3's, for B.S3: the snapshot is
	// looked for under Folder, in every cluster's and server's folder.
	Bucket, Folder string
	// Hold is the config.yaml drop-in k3s starts from after the reset
	// (k3s.HoldPath): held, no pod runs until the Clusters are paused.
	Hold remote.File
}

var _ step.Step = (*Restore)(nil)

// ID implements step.Step.
func (s *Restore) ID() string { return "restore" }

// Host implements step.Step.
func (s *Restore) Host() string { return s.V.Name }

// restoreTokenPath holds the backup's token on the server only while the
// restore runs.
const restoreTokenPath = "/var/lib/rancher/k3s/server/mgmtctl-restore-token"

// restoreScript stops k3s and its pods, restores $1 under the token in
// $2, makes that token the server's (k3s reads server/token when no token
// is configured, and the restored bootstrap data opens only with the
// backup's), and starts k3s again, held (Hold). The uploaded snapshot and
// token go whatever happens: the laptop holds the backup. A pod's
// containers outlive `systemctl stop k3s` (docs.k3s.io upgrades/killall:
// "the K3s containers continue running when the K3s service is stopped";
// k3s-killall.sh, which k3s's install script writes, stops them): a
// provider's manager left running would act on the restored state at
// once.
const restoreScript = `set -eu
snap=$1 tok=$2
trap 'rm -f -- "$tok" "$snap"' EXIT
# A signal ends the script through exit, so the EXIT trap still runs.
trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 130' INT
k3s-killall.sh
k3s server --cluster-reset --etcd-s3=false --cluster-reset-restore-path="$snap" --token-file="$tok"
install -m 600 -o root -g root -- "$tok" /var/lib/rancher/k3s/server/token
systemctl start k3s`

// restoreS3Script is restoreScript for a snapshot in the bucket: $1 is
// its name, which k3s with etcd-s3 set downloads into its snapshot
// directory before the reset (k3s pkg/etcd/etcd.go, Reset: "Retrieving
// etcd snapshot %s from S3") from the folder $3 (the one it was uploaded
// to: its cluster's and server's, not this server's own); the S3 keys
// come from k3s's environment file, as for the k3s unit.
const restoreS3Script = `set -eu
name=$1 tok=$2 folder=$3
trap 'rm -f -- "$tok"' EXIT
trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 130' INT
` + remote.K3sEnv + `
k3s-killall.sh
k3s server --cluster-reset --cluster-reset-restore-path="$name" --etcd-s3-folder="$folder" --token-file="$tok"
install -m 600 -o root -g root -- "$tok" /var/lib/rancher/k3s/server/token
systemctl start k3s`

// Check implements step.Step.
func (s *Restore) Check(ctx context.Context) (step.Plan, error) {
	if s.Hold.Path == "" {
		// A restore that would start k3s with its pods running.
		return step.Plan{}, errors.New("restore: no hold to start k3s with (a bug: the restore phase sets it)")
	}
	res, err := s.V.Host.Look(ctx, remote.CommandPath("k3s"))
	if err != nil {
		return step.Plan{}, err
	}
	if res.ExitCode != 0 {
		return step.Plan{}, fmt.Errorf("k3s is not installed on %s: run mgmtctl apply first (it builds the server the snapshot is restored onto)", s.V.Name)
	}
	if s.B.S3 != "" {
		return s.checkS3(ctx)
	}
	snap := path.Join(SnapshotDir, s.B.Snapshot)
	effects := []effect.Effect{
		effect.Write{Host: s.V.conn(), File: remote.File{Path: snap, Content: s.Snapshot, Mode: 0o600, Owner: "root:root", Sudo: true}},
		effect.Write{Host: s.V.conn(), File: remote.File{Path: restoreTokenPath, Content: append(append([]byte{}, s.Token...), '\n'), Mode: 0o600, Owner: "root:root", Sudo: true}},
		effect.Write{Host: s.V.conn(), File: s.Hold},
		effect.Run{Host: s.V.conn(), Cmd: remote.Script("restore etcd snapshot "+s.B.Snapshot+" with k3s server --cluster-reset", restoreScript, snap, restoreTokenPath).AsRoot()},
	}
	return step.Plan{Changes: []step.Change{{Target: s.V.Name, Action: step.Run,
		Summary: fmt.Sprintf("restore snapshot %s (taken %s, %.1f MiB) on %s: k3s and its pods stop, its etcd is replaced, k3s starts from the snapshot, held (no pod runs) until the Clusters are paused",
			s.B.Snapshot, s.B.Created.Format(time.RFC3339), float64(len(s.Snapshot))/(1<<20), s.V.Name),
		Effects: effects}}}, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// checkS3 plans the restore of the bucket's snapshot B.S3, once the
// server's k3s lists it there. A name the bucket does not have is refused
// before any server's k3s stops: by the restore phase's Prepare, which
// looks before the other servers' Stop steps, and here again, at the
// step's turn, on what the bucket holds then.
func (s *Restore) checkS3(ctx context.Context) (step.Plan, error) {
	f, err := FindInBucket(ctx, s.V.Host, s.V.Name, s.Bucket, s.Folder, s.B.S3)
	if err != nil {
		return step.Plan{}, err
	}
	if len(s.Token) == 0 {
		return step.Plan{}, fmt.Errorf("no cluster token on %s to restore under: a snapshot in S3 restores onto the cluster that took it (restore a laptop backup, which holds its token, onto a new one)", s.V.Name)
	}
	effects := []effect.Effect{
		effect.Write{Host: s.V.conn(), File: remote.File{Path: restoreTokenPath, Content: append(append([]byte{}, s.Token...), '\n'), Mode: 0o600, Owner: "root:root", Sudo: true}},
		effect.Write{Host: s.V.conn(), File: s.Hold},
		effect.Run{Host: s.V.conn(), Cmd: remote.Script("restore etcd snapshot "+s.B.S3+" from S3 with k3s server --cluster-reset", restoreS3Script, s.B.S3, restoreTokenPath, f.Dir).AsRoot()},
	}
	return step.Plan{Changes: []step.Change{{Target: s.V.Name, Action: step.Run,
		Summary: fmt.Sprintf("restore snapshot %s (taken %s, %.1f MiB) from %s on %s: k3s and its pods stop, k3s downloads it, its etcd is replaced, k3s starts from the snapshot, held (no pod runs) until the Clusters are paused",
			s.B.S3, f.Created.Format(time.RFC3339), float64(f.Size)/(1<<20), f.Location, s.V.Name),
		Effects: effects}}}, nil
}

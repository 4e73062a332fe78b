package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/remote/remotetest"
	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

// files is a recording host whose files can be read.
type files struct {
	*remotetest.Host
	content map[string][]byte
}

func (f files) ReadFile(ctx context.Context, path string, sudo bool) ([]byte, error) {
	return f.content[path], nil
}

// snapshotSum answers the sha256 and size query of Fetch's Check as
// sha256sum and stat print them.
func snapshotSum(content []byte) string {
	sum := sha256.Sum256(content)
	return fmt.Sprintf("%s\n%d\n", hex.EncodeToString(sum[:]), len(content))
}

// TestBackupSteps: Save runs its planned command and learns the
// snapshot's name from k3s's answer; Fetch's plan copies the snapshot
// (checked against the sha256 read on the server) and the token into the
// backup directory, writes the rest and deletes the server's copy; Restore
// writes the planned files and runs the planned command. Carried out as a
// run does, each does exactly its plan on the server.
func TestBackupSteps(t *testing.T) {
	ctx := context.Background()
	snapPath := SnapshotDir + "/mgmtctl-lab-mgmt-1764752400"
	h := files{&remotetest.Host{HostName: "lab-mgmt-1", Answer: func(c remote.Cmd) (remote.Result, error) {
		switch {
		case len(c.Args) > 2 && c.Args[1] == "etcd-snapshot" && c.Args[2] == "save":
			return remote.Result{Stderr: []byte(`time="2026-12-03T09:00:00Z" level=info msg="Snapshot mgmtctl-lab-mgmt-1764752400 saved."` + "\n")}, nil
		case c.ReadOnly && len(c.Args) == 5 && c.Args[4] == snapPath:
			return remote.Result{Stdout: []byte(snapshotSum([]byte("etcd bytes")))}, nil
		}
		return remote.Result{}, nil
	}}, map[string][]byte{
		snapPath:  []byte("etcd bytes"),
		TokenPath: []byte("K10abc::server:secret\n"),
	}}
	dir := filepath.Join(t.TempDir(), "lab-mgmt")
	take := &Take{V: &VM{Name: "lab-mgmt", Host: h}, Dir: dir, Config: []byte("kind: ManagementCluster\n"),
		Now: func() time.Time { return time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC) }, Manifest: Manifest{Cluster: "lab-mgmt"}}
	bdir := filepath.Join(dir, "20261203T090000Z")
	plans := map[string][]string{
		"etcd-snapshot": {"on lab-mgmt-1: k3s etcd-snapshot save --etcd-s3=false --name mgmtctl (as root)"},
		"copy": {
			"copy lab-mgmt-1:" + snapPath + " to " + bdir + "/snapshot (0600), sha256 " + strings.Fields(snapshotSum([]byte("etcd bytes")))[0],
			"write " + bdir + "/snapshot.sha256 (75 bytes, 0600)",
			"copy lab-mgmt-1:" + TokenPath + " to " + bdir + "/token (0600)",
			"write " + bdir + "/mgmt.yaml (24 bytes, 0600)",
			"write " + bdir + "/backup.json (220 bytes, 0600)",
			"on lab-mgmt-1: k3s etcd-snapshot delete --etcd-s3=false mgmtctl-lab-mgmt-1764752400 (as root)",
		},
	}
	for _, s := range []step.Step{&Save{T: take}, &Fetch{T: take}} {
		p, err := s.Check(ctx)
		if err != nil || len(p.Changes) != 1 {
			t.Fatalf("%s plan: %+v %v", s.ID(), p, err)
		}
		if got := steptest.Effects(p); !reflect.DeepEqual(got, plans[s.ID()]) {
			t.Errorf("%s plan:\n%q\nwant\n%q", s.ID(), got, plans[s.ID()])
		}
		if err := step.CarryOut(ctx, s, p, steptest.Executor(nil, h)); err != nil {
			t.Fatalf("%s: %v", s.ID(), err)
		}
	}
	want := []string{"run k3s etcd-snapshot save --etcd-s3=false --name mgmtctl", "run k3s etcd-snapshot delete --etcd-s3=false mgmtctl-lab-mgmt-1764752400"}
	if got := h.Effects(); !reflect.DeepEqual(got, want) {
		t.Errorf("did %q", got)
	}
	b, err := Read(bdir)
	if err != nil || b.Snapshot != "mgmtctl-lab-mgmt-1764752400" {
		t.Fatalf("backup: %+v %v", b, err)
	}
	snap, token, err := b.Load()
	if err != nil || string(snap) != "etcd bytes" || string(token) != "K10abc::server:secret" {
		t.Errorf("backup content: %q %q %v", snap, token, err)
	}

	// Restore carries out its plan.
	rh := &remotetest.Host{HostName: "lab-mgmt-1"}
	hold := remote.File{Path: "/etc/rancher/k3s/config.yaml.d/hold.yaml", Content: []byte("disable-agent: true\n"), Mode: 0o600, Owner: "root:root", Sudo: true}
	r := &Restore{V: &VM{Name: "lab-mgmt", Host: rh}, B: b, Snapshot: snap, Token: token, Hold: hold}
	p, err := r.Check(ctx)
	if err != nil || len(p.Changes) != 1 {
		t.Fatalf("restore plan: %+v %v", p, err)
	}
	wantPlan := []string{"on lab-mgmt-1: write " + snapPath + " (10 bytes, 0600, root:root)", "on lab-mgmt-1: write " + restoreTokenPath + " (22 bytes, 0600, root:root)",
		"on lab-mgmt-1: write " + hold.Path + " (20 bytes, 0600, root:root)",
		"on lab-mgmt-1: restore etcd snapshot mgmtctl-lab-mgmt-1764752400 with k3s server --cluster-reset (as root)"}
	if got := steptest.Effects(p); !reflect.DeepEqual(got, wantPlan) {
		t.Errorf("restore plan:\n%q\nwant\n%q", got, wantPlan)
	}
	before := len(rh.Effects())
	if err := step.CarryOut(ctx, r, p, steptest.Executor(nil, rh)); err != nil {
		t.Fatal(err)
	}
	run := remote.Script("", restoreScript, snapPath, restoreTokenPath)
	if got := rh.Effects()[before:]; !reflect.DeepEqual(got, []string{"write " + snapPath, "write " + restoreTokenPath, "write " + hold.Path, "run " + run.String()}) {
		t.Errorf("restore did %q", got)
	}
}

// TestFetchRefusesACopyNotPlanned: a snapshot whose bytes are not the ones
// whose sha256 the plan holds (changed on the server since) is not kept,
// and the server's copy stays.
func TestFetchRefusesACopyNotPlanned(t *testing.T) {
	ctx := context.Background()
	snapPath := SnapshotDir + "/mgmtctl-lab-mgmt-1"
	h := files{&remotetest.Host{HostName: "lab-mgmt", Answer: func(c remote.Cmd) (remote.Result, error) {
		return remote.Result{Stdout: []byte(snapshotSum([]byte("planned bytes")))}, nil
	}}, map[string][]byte{snapPath: []byte("other bytes"), TokenPath: []byte("K10abc::server:secret\n")}}
	take := &Take{V: &VM{Name: "lab-mgmt", Host: h}, Dir: t.TempDir(), Config: []byte("kind: ManagementCluster\n"),
		Now: time.Now, Manifest: Manifest{Cluster: "lab-mgmt"}, snapshot: "mgmtctl-lab-mgmt-1"}
	f := &Fetch{T: take}
	p, err := f.Check(ctx)
	if err != nil || len(p.Changes) != 1 || !strings.Contains(p.Changes[0].Summary, "then k3s etcd-snapshot delete --etcd-s3=false mgmtctl-lab-mgmt-1 on the server") {
		t.Fatalf("plan: %+v %v", p, err)
	}
	err = step.CarryOut(ctx, f, p, steptest.Executor(nil, h))
	var mm *effect.MismatchError
	if !errors.As(err, &mm) {
		t.Fatalf("err = %v", err)
	}
	if all, _ := List(take.Dir); len(all) != 0 {
		t.Errorf("backups %+v", all)
	}
	if got := h.Effects(); len(got) != 0 {
		t.Errorf("did %q on the server", got)
	}
}

// TestBeforeARiskyChange: apply's backup is taken only when its reason
// says so (asked once for every step), and records why.
func TestBeforeARiskyChange(t *testing.T) {
	asked := 0
	reason := ""
	b := &Before{Reason: func(context.Context) (string, error) { asked++; return reason, nil }}
	take := &Take{V: &VM{Name: "lab-mgmt", Host: &remotetest.Host{HostName: "lab-mgmt"}}, Before: b}
	p, err := (&Save{T: take}).Check(context.Background())
	if err != nil || p.Skip == "" || !p.Empty() {
		t.Errorf("no risky change: %+v, %v", p, err)
	}
	if p, err := (&Fetch{T: take}).Check(context.Background()); err != nil || p.Skip == "" {
		t.Errorf("no snapshot to copy: %+v, %v", p, err)
	}

	reason = "before upgrading k3s from v1.35.7+k3s1 to v1.35.8+k3s1"
	b2 := &Before{Reason: b.Reason}
	take.Before = b2
	p, err = (&Save{T: take}).Check(context.Background())
	if err != nil || len(p.Changes) != 1 || !strings.Contains(p.Changes[0].Summary, reason) || take.Manifest.Reason != reason {
		t.Errorf("a risky change: %+v, %v, manifest %+v", p, err, take.Manifest)
	}
	(&Save{T: take}).Check(context.Background())
	if asked != 2 {
		t.Errorf("the reason was asked %d times for two decisions", asked)
	}
	var none *Before
	if r, err := none.Get(context.Background()); r != "" || err != nil {
		t.Errorf("no Before: %q, %v", r, err)
	}
}

// TestRestoreFromS3Folders: restore --from s3:NAME finds NAME under
// spec.backup.s3.folder, in a cluster's server folder or in the layout
// before per-cluster folders, and has k3s download it from that folder
// (--etcd-s3-folder); a name in no folder, or in two, is refused before
// anything is done.
func TestRestoreFromS3Folders(t *testing.T) {
	ls := `Name                                     Location                                                                         Size       Created
etcd-snapshot-lab-mgmt-1796500060        s3://k3s-snapshots/k3s/mgmt/cluster-0123456789ab/lab-mgmt/etcd-snapshot-lab-mgmt-1796500060 2048 2026-12-07T01:01:00Z
etcd-snapshot-lab-mgmt-1796400000        s3://k3s-snapshots/k3s/mgmt/etcd-snapshot-lab-mgmt-1796400000                    2048       2026-12-05T21:13:20Z
etcd-snapshot-lab-mgmt-1796300000        s3://k3s-snapshots/k3s/mgmt/cluster-0123456789ab/lab-mgmt/etcd-snapshot-lab-mgmt-1796300000 2048 2026-12-04T17:26:40Z
etcd-snapshot-lab-mgmt-1796300000        s3://k3s-snapshots/k3s/mgmt/cluster-ba9876543210/lab-mgmt/etcd-snapshot-lab-mgmt-1796300000 2048 2026-12-04T17:26:40Z
`
	for _, tc := range []struct {
		name, folder, err string
	}{
		{"etcd-snapshot-lab-mgmt-1796500060", "k3s/mgmt/cluster-0123456789ab/lab-mgmt", ""},
		{"etcd-snapshot-lab-mgmt-1796400000", "k3s/mgmt", ""},
		{"etcd-snapshot-lab-mgmt-1", "", "no snapshot etcd-snapshot-lab-mgmt-1 in the bucket"},
		{"etcd-snapshot-lab-mgmt-1796300000", "", "is in 2 folders of the bucket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &remotetest.Host{HostName: "lab-mgmt", Answer: func(c remote.Cmd) (remote.Result, error) {
				if c.Name == "k3s etcd-snapshot ls" {
					if !reflect.DeepEqual(c.Args[len(c.Args)-2:], []string{"ls", "--etcd-s3-folder=k3s/mgmt"}) {
						t.Errorf("listed with %q", c.Args)
					}
					return remote.Result{Stdout: []byte(ls)}, nil
				}
				return remote.Result{}, nil // k3s is installed
			}}
			r := &Restore{V: &VM{Name: "lab-mgmt", Host: h}, B: Backup{S3: tc.name}, Token: []byte("K10abc::server:secret"), Bucket: "k3s-snapshots", Folder: "k3s/mgmt",
				Hold: remote.File{Path: "/etc/rancher/k3s/config.yaml.d/hold.yaml", Content: []byte("disable-agent: true\n")}}
			p, err := r.Check(context.Background())
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || len(p.Changes) != 1 {
				t.Fatalf("plan %+v, %v", p, err)
			}
			want := remote.Script("", restoreS3Script, tc.name, restoreTokenPath, tc.folder).AsRoot()
			effects := p.Changes[0].Effects
			if run, ok := effects[len(effects)-1].(effect.Run); !ok || !reflect.DeepEqual(run.Cmd.Args, want.Args) {
				t.Errorf("the restore runs %+v, want k3s to download from %s", effects[len(effects)-1], tc.folder)
			}
		})
	}
}

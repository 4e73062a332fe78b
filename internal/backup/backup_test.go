package backup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/remote"

	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

// TestWriteListLoad: a backup is private (0700 directory, 0600 files), is
// listed newest first, loads with its token, and a snapshot that changed
// after it was taken (truncated, a byte flipped) is refused.
func TestWriteListLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "lab-mgmt")
	t0 := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	for i, stamp := range []string{"a", "b", "c"} {
		m := Manifest{Cluster: "lab-mgmt", Created: t0.Add(time.Duration(i) * time.Hour), Snapshot: "mgmtctl-lab-mgmt-" + stamp, Pins: map[string]string{"k3s": "v1.35.7+k3s1"}}
		if err := Write(filepath.Join(dir, stamp), m, []byte("snapshot "+stamp), []byte("K10abc::server:secret\n"), []byte("kind: ManagementCluster\n")); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(dir, "interrupted"), 0o700) // no manifest: not a backup
	list, err := List(dir)
	if err != nil || len(list) != 3 || list[0].Snapshot != "mgmtctl-lab-mgmt-c" || list[2].Snapshot != "mgmtctl-lab-mgmt-a" {
		t.Fatalf("list: %+v %v", list, err)
	}
	for _, f := range []string{"snapshot", "snapshot.sha256", "token", "mgmt.yaml", "backup.json"} {
		fi, err := os.Stat(filepath.Join(list[0].Dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", f, fi.Mode(), err)
		}
	}
	if fi, _ := os.Stat(list[0].Dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("backup directory mode %v", fi.Mode())
	}
	snap, token, err := list[0].Load()
	if err != nil || string(snap) != "snapshot c" || string(token) != "K10abc::server:secret" {
		t.Fatalf("load: %q %q %v", snap, token, err)
	}
	if err := Write(list[0].Dir, list[0].Manifest, nil, nil, nil); err == nil {
		t.Error("a backup was overwritten")
	}

	for name, damage := range map[string][]byte{"truncated": []byte("snap"), "flipped": []byte("snapshot C")} {
		os.WriteFile(filepath.Join(list[1].Dir, "snapshot"), damage, 0o600)
		if _, _, err := list[1].Load(); err == nil || !strings.Contains(err.Error(), "is damaged") {
			t.Errorf("%s snapshot: %v", name, err)
		}
	}
}

func TestPinDiff(t *testing.T) {
	b := map[string]string{"k3s": "v1.35.7+k3s1", "provider core/cluster-api": "v1.12.10"}
	c := map[string]string{"k3s": "v1.35.7+k3s1", "provider core/cluster-api": "v1.12.11", "certManager": "v1.21.2"}
	want := []string{"certManager: none in the backup, v1.21.2 in the config", "provider core/cluster-api: v1.12.10 in the backup, v1.12.11 in the config"}
	if got := PinDiff(b, c); !reflect.DeepEqual(got, want) {
		t.Errorf("got %q", got)
	}
	if got := PinDiff(b, b); got != nil {
		t.Errorf("same pins: %q", got)
	}
}

// TestPruneKeepsTheNewest: backups beyond Keep go, oldest first; with no
// more than Keep, nothing is planned.
func TestPruneKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	for i, name := range []string{"old", "mid", "new"} {
		if err := Write(filepath.Join(dir, name), Manifest{Cluster: "lab-mgmt", Created: t0.Add(time.Duration(i) * time.Hour)}, []byte(name), []byte("t"), nil); err != nil {
			t.Fatal(err)
		}
	}
	p, err := (&Prune{Dir: dir, Keep: 2}).Check(context.Background())
	if err != nil || len(p.Changes) != 1 || !reflect.DeepEqual(steptest.Effects(p), []string{"remove " + filepath.Join(dir, "old") + " and all it holds"}) {
		t.Fatalf("plan: %+v %v", p, err)
	}
	if err := step.CarryOut(context.Background(), &Prune{Dir: dir, Keep: 2}, p, steptest.Executor(nil)); err != nil {
		t.Fatal(err)
	}
	if list, _ := List(dir); len(list) != 2 || list[1].Dir != filepath.Join(dir, "mid") {
		t.Errorf("left: %+v", list)
	}
	if p, _ := (&Prune{Dir: dir, Keep: 2}).Check(context.Background()); !p.Empty() {
		t.Errorf("nothing to prune, planned %+v", p)
	}
}

func TestReadTakesTheDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	m := Manifest{Cluster: "lab-mgmt", Created: time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC), Snapshot: "s"}
	if err := Write(dir, m, []byte("snapshot"), []byte("token\n"), []byte("kind: ManagementCluster\n")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, from, wantDir, wantErr string
	}{
		{"the directory", dir, dir, ""},
		{"its backup.json stands for it", filepath.Join(dir, "backup.json"), dir, ""},
		{"another file is refused, naming what is wanted", filepath.Join(dir, "snapshot"), "", "is a file: a backup is the directory that holds backup.json"},
		{"no such directory", filepath.Join(dir, "nope"), "", "is not a complete mgmtctl backup"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := Read(c.from)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || b.Dir != c.wantDir || b.Snapshot != "s" {
				t.Fatalf("%+v %v", b, err)
			}
		})
	}
}

func TestEtcdDisabled(t *testing.T) {
	sqlite := &remote.ExitError{Host: "vm", Cmd: "k3s etcd-snapshot save", Code: 1, Stderr: `time="2026-12-03T09:00:00Z" level=fatal msg="Error: see server log for details: etcd datastore disabled"`}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"k3s on SQLite", sqlite, true},
		{"wrapped", fmt.Errorf("run: %w", sqlite), true},
		{"another exit", &remote.ExitError{Code: 1, Stderr: "permission denied"}, false},
		{"the words outside k3s's stderr", errors.New("etcd datastore disabled"), false},
	} {
		if got := etcdDisabled(c.err); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestParseSnapshots reads `k3s etcd-snapshot ls`, the server's snapshots
// and the bucket's, skipping the header and what does not parse.
func TestParseSnapshots(t *testing.T) {
	ls := "Name                                     Location                                                                         Size       Created\n" +
		"etcd-snapshot-lab-mgmt-1764752400        file:///var/lib/rancher/k3s/server/db/snapshots/etcd-snapshot-lab-mgmt-1764752400 4116512    2026-12-03T09:00:00Z\n" +
		"etcd-snapshot-lab-mgmt-1764752400        s3://k3s-snapshots/lab-mgmt/etcd-snapshot-lab-mgmt-1764752400                     4116512    2026-12-03T09:00:00Z\n" +
		"time=\"2026-12-03T09:00:01Z\" level=warning msg=\"x\"\n"
	got := ParseSnapshots(ls)
	if len(got) != 2 || got[0].InS3() || !got[1].InS3() || got[1].Size != 4116512 || got[1].Name != "etcd-snapshot-lab-mgmt-1764752400" ||
		!got[1].Created.Equal(time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("ParseSnapshots = %+v", got)
	}
}

// TestBucketed: the bucket's snapshots under the configured folder, each
// with its folder and cluster: a cluster's server folder, the layout
// before per-cluster folders (the folder itself); a folder that only
// shares the prefix, another bucket's and the server's own are left out.
func TestBucketed(t *testing.T) {
	ls := `Name                                     Location                                                                         Size       Created
on-demand-lab-mgmt-1796500000            file:///var/lib/rancher/k3s/server/db/snapshots/on-demand-lab-mgmt-1796500000    1024       2026-12-07T01:00:00Z
etcd-snapshot-lab-mgmt-1796500060        s3://k3s-snapshots/k3s/mgmt/cluster-0123456789ab/lab-mgmt/etcd-snapshot-lab-mgmt-1796500060 2048 2026-12-07T01:01:00Z
etcd-snapshot-lab-mgmt-1796400000        s3://k3s-snapshots/k3s/mgmt/etcd-snapshot-lab-mgmt-1796400000                    2048       2026-12-05T21:13:20Z
etcd-snapshot-lab-mgmt-1796500120        s3://k3s-snapshots/k3s/mgmt2/cluster-0123456789ab/lab-mgmt/etcd-snapshot-lab-mgmt-1796500120 2048 2026-12-07T01:02:00Z
etcd-snapshot-lab-mgmt-1796500180        s3://other/k3s/mgmt/etcd-snapshot-lab-mgmt-1796500180                            2048       2026-12-07T01:03:00Z
`
	var got []string
	for _, b := range Bucketed(ls, "k3s-snapshots", "k3s/mgmt") {
		got = append(got, b.Name+" "+b.Dir+" "+b.Cluster)
	}
	want := []string{
		"etcd-snapshot-lab-mgmt-1796500060 k3s/mgmt/cluster-0123456789ab/lab-mgmt 0123456789ab",
		"etcd-snapshot-lab-mgmt-1796400000 k3s/mgmt ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := len(Bucketed(ls, "k3s-snapshots", "")); n != 3 {
		t.Errorf("at the bucket's root: %d snapshots, want every one of the bucket's (3)", n)
	}
}

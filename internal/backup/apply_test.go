package backup

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/remote/remotetest"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// files is a recording host whose files can be read.
type files struct {
	*remotetest.Host
	content map[string][]byte
}

func (f files) ReadFile(ctx context.Context, path string, sudo bool) ([]byte, error) {
	return f.content[path], nil
}

// TestBackupSteps: Save runs the planned command and learns the
// snapshot's name from k3s's answer; Fetch writes the backup where its
// plan says and deletes the server's copy; Restore writes the planned
// files and runs the planned command, nothing recomputed.
func TestBackupSteps(t *testing.T) {
	ctx := context.Background()
	h := files{&remotetest.Host{HostName: "lab-mgmt", Answer: func(c remote.Cmd) (remote.Result, error) {
		if len(c.Args) > 2 && c.Args[1] == "etcd-snapshot" && c.Args[2] == "save" {
			return remote.Result{Stderr: []byte(`time="2026-12-03T09:00:00Z" level=info msg="Snapshot mgmtctl-lab-mgmt-1764752400 saved."` + "\n")}, nil
		}
		return remote.Result{}, nil
	}}, map[string][]byte{
		SnapshotDir + "/mgmtctl-lab-mgmt-1764752400": []byte("etcd bytes"),
		TokenPath: []byte("K10abc::server:secret\n"),
	}}
	dir := filepath.Join(t.TempDir(), "lab-mgmt")
	take := &Take{V: &VM{Name: "lab-mgmt", Host: h}, Dir: dir, Config: []byte("kind: ManagementCluster\n"),
		Now: func() time.Time { return time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC) }, Manifest: Manifest{Cluster: "lab-mgmt"}}
	for _, s := range []step.Step{&Save{T: take}, &Fetch{T: take}} {
		p, err := s.Check(ctx)
		if err != nil || len(p.Changes) != 1 {
			t.Fatalf("%s plan: %+v %v", s.ID(), p, err)
		}
		if err := s.Apply(ctx, p); err != nil {
			t.Fatalf("%s: %v", s.ID(), err)
		}
	}
	want := []string{"run sudo-as-root k3s etcd-snapshot save --name mgmtctl", "run sudo-as-root k3s etcd-snapshot delete mgmtctl-lab-mgmt-1764752400"}
	var got []string
	for _, c := range h.Ran() {
		pre := "run "
		if c.Sudo {
			pre += "sudo-as-root "
		}
		got = append(got, pre+c.String())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ran %q", got)
	}
	b, err := Read(filepath.Join(dir, "20261203T090000Z"))
	if err != nil || b.Snapshot != "mgmtctl-lab-mgmt-1764752400" {
		t.Fatalf("backup: %+v %v", b, err)
	}
	snap, token, err := b.Load()
	if err != nil || string(snap) != "etcd bytes" || string(token) != "K10abc::server:secret" {
		t.Errorf("backup content: %q %q %v", snap, token, err)
	}

	// Restore carries out its payload.
	rh := &remotetest.Host{HostName: "lab-mgmt"}
	r := &Restore{V: &VM{Name: "lab-mgmt", Host: rh}, B: b, Snapshot: snap, Token: token}
	p, err := r.Check(ctx)
	if err != nil || len(p.Changes) != 1 {
		t.Fatalf("restore plan: %+v %v", p, err)
	}
	pl := p.Changes[0].Payload.(Restoration)
	if pl.Token.Mode != 0o600 || string(pl.Token.Content) != "K10abc::server:secret\n" || pl.Snapshot.Path != SnapshotDir+"/mgmtctl-lab-mgmt-1764752400" {
		t.Errorf("restore payload: %+v", pl)
	}
	pl.Snapshot.Path, pl.Run = "/planned", remote.Command("echo", "planned")
	p.Changes[0].Payload = pl
	if err := r.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	if ev := rh.Events(); !reflect.DeepEqual(ev[1:], []string{"write /planned", "write " + restoreTokenPath, "run echo planned"}) {
		t.Errorf("restore did %q", ev)
	}
}

// TestFetchCarriesOutItsCopy: the backup's directory, its time, what is
// read and the server-side delete are the plan's, not chosen again: a
// clock that moves between Check and Apply changes nothing.
func TestFetchCarriesOutItsCopy(t *testing.T) {
	ctx := context.Background()
	h := files{&remotetest.Host{HostName: "lab-mgmt"}, map[string][]byte{
		"/planned/snap": []byte("etcd bytes"), "/planned/token": []byte("K10abc::server:secret\n")}}
	clock := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	take := &Take{V: &VM{Name: "lab-mgmt", Host: h}, Dir: t.TempDir(), Config: []byte("kind: ManagementCluster\n"),
		Now: func() time.Time { clock = clock.Add(time.Hour); return clock }, Manifest: Manifest{Cluster: "lab-mgmt"}, snapshot: "mgmtctl-lab-mgmt-1"}
	f := &Fetch{T: take}
	p, err := f.Check(ctx)
	if err != nil || len(p.Changes) != 1 || !strings.Contains(p.Changes[0].Summary, "then k3s etcd-snapshot delete mgmtctl-lab-mgmt-1 on the server") {
		t.Fatalf("plan: %+v %v", p, err)
	}
	c := p.Changes[0].Payload.(Copy)
	planned := filepath.Join(take.Dir, "planned")
	c.Snapshot, c.Token, c.Dir, c.Delete = "/planned/snap", "/planned/token", planned, remote.Command("echo", "deleted")
	p.Changes[0].Payload = c
	if err := f.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	b, err := Read(planned)
	if err != nil || !b.Created.Equal(c.Created) || b.Snapshot != "snap" {
		t.Fatalf("backup %+v %v; want its time %s from the plan", b, err, c.Created)
	}
	if got := h.Effects(); !reflect.DeepEqual(got, []string{"run echo deleted"}) {
		t.Errorf("effects %q", got)
	}
}

package session

import (
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/proxmox"
)

func load(t *testing.T) *config.Loaded {
	t.Helper()
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519.pub"), []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBNqX0ocPvUhqnXmSiE1X44IwvtNlnZ+0Zt4F3iHFNQR user@laptop\n"), 0o644)
	cfg := filepath.Join(t.TempDir(), "mgmt.yaml")
	os.WriteFile(cfg, []byte("apiVersion: mgmtctl/v1alpha1\nkind: ManagementCluster\nmetadata:\n  name: lab-mgmt\nspec:\n  proxmox:\n    host: 192.0.2.10\n    node: pve\n    tokenID: capmox@pve!capi\n  vm:\n    id: 110\n    address: 192.0.2.50/24\n    gateway: 192.0.2.1\n"), 0o644)
	l, err := config.Load(cfg, "", config.Env{Home: home, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestRunRecordOfAWaitThatGaveUp: the session, not a step, appends the
// "gave up" line with its time to the record of a VM it created and never
// reached, when wait-ssh fails with a *proxmox.NeverAnsweredError; nothing
// for another error, another VM, a VM without a record, or a read-only
// session; and a line without a time (an older mgmtctl's) still reads as
// a run that gave up.
func TestRunRecordOfAWaitThatGaveUp(t *testing.T) {
	l := load(t)
	srv := l.Servers()[0]
	gaveUp := &proxmox.NeverAnsweredError{VMID: "110", Err: errors.New("VM 110 is running but did not answer SSH")}
	s := &Session{Config: l}
	rec := s.NewVMRecord(srv)
	marker := s.NewVMMarker(srv)

	// No record: the VM was reached before, or not made by mgmtctl.
	if err := s.StepFailed(srv.Name, gaveUp); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a record was made where there was none: %v", err)
	}

	os.MkdirAll(filepath.Dir(marker), 0o700)
	os.WriteFile(marker, []byte("me@laptop pid 1\n"), 0o600)
	if _, ok := rec.GaveUpAt(); ok || !rec.NeverReached() {
		t.Fatal("a fresh record says a run gave up, or the VM was reached")
	}
	for _, c := range []struct {
		name string
		s    *Session
		host string
		err  error
	}{
		{"another error", s, srv.Name, errors.New("qm start failed")},
		{"another server", s, "lab-mgmt-2", gaveUp},
		{"another VM", s, srv.Name, &proxmox.NeverAnsweredError{VMID: "111", Err: gaveUp.Err}},
		{"a read-only session", &Session{Config: l, ReadOnly: true}, srv.Name, gaveUp},
	} {
		if err := c.s.StepFailed(c.host, c.err); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if _, ok := rec.GaveUpAt(); ok {
			t.Fatalf("%s: recorded", c.name)
		}
	}

	before := time.Now().Add(-time.Second)
	if err := s.StepFailed(srv.Name, gaveUp); err != nil {
		t.Fatal(err)
	}
	at, ok := rec.GaveUpAt()
	if !ok || at.Before(before) || at.After(time.Now().Add(time.Second)) {
		t.Errorf("GaveUpAt = %v, %v; want about now", at, ok)
	}
	b, _ := os.ReadFile(marker)
	if !strings.HasPrefix(string(b), "me@laptop pid 1\n"+gaveUpLine+" at ") || !strings.HasSuffix(string(b), "Z\n") {
		t.Errorf("record:\n%s", b)
	}
	if fi, _ := os.Stat(marker); fi.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v", fi.Mode().Perm())
	}

	// An older mgmtctl's line, without a time.
	os.WriteFile(marker, []byte("me@laptop pid 1\na run waited for SSH to the end of its bound\n"), 0o600)
	if at, ok := rec.GaveUpAt(); !ok || !at.IsZero() {
		t.Errorf("an old line reads as %v, %v; want a run that gave up, time unknown", at, ok)
	}
}

// client-go cancels a request through the transports it wraps only where
// each says what it wraps.
var _ utilnet.RoundTripperWrapper = linkAware{}

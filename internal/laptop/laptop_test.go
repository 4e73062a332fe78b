package laptop

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

// TestRemoveAndForget: a present file and a present known_hosts entry are
// planned for removal and removed (the other entries stay); absent ones
// plan nothing.
func TestRemoveAndForget(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "lab-mgmt.kubeconfig")
	os.WriteFile(kc, []byte("apiVersion: v1\n"), 0o600)
	kh := filepath.Join(dir, "known_hosts")
	os.WriteFile(kh, []byte("192.0.2.50 ssh-ed25519 AAAAvm\n192.0.2.60 ssh-ed25519 AAAAother\n"), 0o600)
	ctx := context.Background()

	rm := &RemoveFile{StepID: "admin-kubeconfig", Path: kc, What: "the admin kubeconfig"}
	fg := &ForgetHostKey{StepID: "vm-host-key", File: kh, Addr: "192.0.2.50:22"}
	p, err := rm.Check(ctx)
	if err != nil || len(p.Changes) != 1 || p.Changes[0].Summary != "remove the admin kubeconfig "+kc {
		t.Fatalf("plan: %+v %v", p, err)
	}
	if got := steptest.Effects(p); !reflect.DeepEqual(got, []string{"remove " + kc}) {
		t.Errorf("effects %q", got)
	}
	if err := step.CarryOut(ctx, rm, p, steptest.Executor(nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(kc); !os.IsNotExist(err) {
		t.Errorf("still there: %v", err)
	}
	if p, err := rm.Check(ctx); err != nil || !p.Empty() {
		t.Errorf("after: %+v %v", p, err)
	}

	p, err = fg.Check(ctx)
	if err != nil || len(p.Changes) != 1 {
		t.Fatalf("plan: %+v %v", p, err)
	}
	if got := steptest.Effects(p); !reflect.DeepEqual(got, []string{"remove 192.0.2.50:22 from " + kh}) {
		t.Errorf("effects %q", got)
	}
	if err := step.CarryOut(ctx, fg, p, steptest.Executor(nil)); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(kh); string(b) != "192.0.2.60 ssh-ed25519 AAAAother\n" {
		t.Errorf("known_hosts: %q", b)
	}
	if p, err := fg.Check(ctx); err != nil || !p.Empty() {
		t.Errorf("after: %+v %v", p, err)
	}
}

// TestRecordHostKey: once the run accepted a new VM's key, the plan
// records it and removes the new-VM record, and carrying it out does
// exactly that; a key recorded by a run cut short leaves only the record
// to remove; without a record, or before the VM is reached, nothing is
// planned.
func TestRecordHostKey(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ssh.NewPublicKey(pub)
	line := "192.0.2.50 " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))) + "\n"
	for _, tc := range []struct {
		name    string
		marker  bool
		known   string // known_hosts' content
		learned ssh.PublicKey
		plan    []string
		after   string
	}{
		{name: "no record", known: line, learned: key, after: line},
		{name: "learned", marker: true, learned: key, plan: []string{"record 192.0.2.50:22's host key " + ssh.FingerprintSHA256(key) + " in KH", "remove MARKER"}, after: line},
		{name: "recorded, record left", marker: true, known: line, plan: []string{"remove MARKER"}, after: line},
		{name: "not reached yet", marker: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			kh, marker := filepath.Join(dir, "known_hosts"), filepath.Join(dir, "new-vm-110-192.0.2.50")
			if tc.known != "" {
				os.WriteFile(kh, []byte(tc.known), 0o600)
			}
			if tc.marker {
				os.WriteFile(marker, []byte("u@laptop pid 1\n"), 0o600)
			}
			s := &RecordHostKey{VM: "lab-mgmt", File: kh, Addr: "192.0.2.50:22", Marker: marker, Learned: func() ssh.PublicKey { return tc.learned }}
			p, err := s.Check(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range steptest.Effects(p) {
				got = append(got, strings.NewReplacer(kh, "KH", marker, "MARKER").Replace(e))
			}
			if !reflect.DeepEqual(got, tc.plan) {
				t.Fatalf("plan %q, want %q", got, tc.plan)
			}
			if err := step.CarryOut(context.Background(), s, p, steptest.Executor(nil)); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(kh)
			if string(b) != tc.after {
				t.Errorf("known_hosts %q, want %q", b, tc.after)
			}
			if _, err := os.Stat(marker); tc.marker && tc.plan != nil && !os.IsNotExist(err) {
				t.Errorf("record still there: %v", err)
			}
		})
	}
}

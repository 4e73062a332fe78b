package laptop

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

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

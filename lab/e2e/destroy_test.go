package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDestroy: destroy lists what it removes and asks; a closed stdin
// removes nothing; a VM at the VMID that is not mgmtctl's is refused with
// nothing removed; confirmed, the VM goes with its disks and the laptop's
// kubeconfigs and known_hosts entry with it, the image stays; a second
// destroy is a no-op; apply builds a fresh VM.
func TestDestroy(t *testing.T) {
	t.Parallel()
	e := startConverged(t)
	home := e.LaptopHome()
	admin, ro := filepath.Join(home, ".kube/lab-mgmt.kubeconfig"), filepath.Join(home, ".kube/lab-mgmt-ro.kubeconfig")
	kh := filepath.Join(home, ".config/mgmtctl/known_hosts")
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	vmExists := func() bool { return e.PVE("qm status 110").Code == 0 }
	if !exists(admin) || !exists(ro) || !vmExists() {
		t.Fatal("apply left no kubeconfigs or no VM")
	}

	r := e.mgmtctl("destroy")
	if r.Code != 1 || !strings.Contains(r.Stderr, "nothing was removed") {
		t.Fatalf("closed stdin: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	for _, want := range []string{"destroy VM 110 (lab-mgmt) on pve with its disks", "the admin kubeconfig " + admin, "the inspector kubeconfig " + ro, "the host key of 192.0.2.50:22 from " + kh} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("the listing lacks %q:\n%s", want, r.Stdout)
		}
	}
	if !vmExists() || !exists(admin) {
		t.Fatal("an unconfirmed destroy removed something")
	}

	// The VM at the VMID is not mgmtctl's (someone re-tagged it).
	mustSucceed(t, e.PVE("qm set 110 --tags production"), "retag")
	r = e.mgmtctl("destroy", "--yes")
	if r.Code != 1 || !strings.Contains(r.Stderr, `VM 110 on pve is not mgmtctl's (name "lab-mgmt", tags "production"`) || !vmExists() || !exists(admin) {
		t.Fatalf("foreign VM: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	mustSucceed(t, e.PVE("qm set 110 --tags mgmtctl"), "retag back")

	r = e.mgmtctl("destroy", "--yes")
	mustSucceed(t, r, "destroy")
	if vmExists() || exists(admin) || exists(ro) {
		t.Errorf("left behind: VM %v, kubeconfigs %v %v", vmExists(), exists(admin), exists(ro))
	}
	if b, _ := os.ReadFile(kh); strings.Contains(string(b), "192.0.2.50") {
		t.Errorf("known_hosts still has the VM: %s", b)
	}
	if r := e.PVE("ls /var/lib/vz/template/iso"); !strings.Contains(r.Stdout, ".img") {
		t.Errorf("the image was removed: %q", r.Stdout)
	}
	r = e.mgmtctl("destroy")
	if r.Code != 0 || !strings.Contains(r.Stdout, "nothing to destroy") {
		t.Errorf("second destroy: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	mustSucceed(t, e.apply("--tags", "vm"), "a fresh VM")
}

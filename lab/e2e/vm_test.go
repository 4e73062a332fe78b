package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVMPhaseConverges: check changes nothing; apply converges; the second
// apply reports changed=0.
func TestVMPhaseConverges(t *testing.T) {
	t.Parallel()
	e := start(t)
	before := e.pveState()
	r := e.mgmtctl("plan", "--tags", "vm,k3s")
	mustSucceed(t, r, "plan")
	if after := e.pveState(); after != before {
		t.Fatalf("--check changed the node:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if r := e.PVE("qm list"); r.Stdout != "" {
		t.Fatalf("--check created a VM: %s", r.Stdout)
	}
	for _, want := range []string{"changed (check): [pve] vm/create-vm", "+qm create 110 --name lab-mgmt --cores 2 --memory 4096 --net0 virtio,bridge=vmbr0,tag=4",
		"+tls-san:", "changed (check): [lab-mgmt] k3s/install: install k3s v1.35.7+k3s1", "check mode: 9 steps would change"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("plan lacks %q:\n%s", want, r.Stdout)
		}
	}

	r = e.apply("--tags", "vm")
	mustSucceed(t, r, "first apply")
	// image, create-vm, grow-disk, start-vm, record-host-key; wait-ssh waited, which is
	// not a change.
	if got := recap(t, r); !strings.Contains(got, "changed=5 ") || !strings.Contains(r.Stdout, "ok: [lab-mgmt] vm/wait-ssh: SSH answers and cloud-init is done") || !strings.Contains(r.Stdout, "changed: [lab-mgmt] vm/record-host-key: record 192.0.2.50:22") {
		t.Errorf("first apply: %s\n%s", got, r.Stdout)
	}
	r = e.apply("--tags", "vm", "--detailed-exitcode", "--timings")
	mustSucceed(t, r, "second apply")
	if got := recap(t, r); !strings.Contains(got, "changed=0 failed=0") {
		t.Errorf("second apply: %s\n%s", got, r.Stdout)
	}
	// --timings: where the run's time went, after the recap.
	for _, want := range []string{"\nTIMINGS ***", "\npreflight ", "\nphase vm ", "steps by host:\n", "slowest steps:\n  vm/gather-facts [pve] "} {
		if !strings.Contains(r.Stdout[strings.Index(r.Stdout, "RECAP"):], want) {
			t.Errorf("--timings lacks %q:\n%s", want, r.Stdout)
		}
	}
	if r := e.PVE("qm config 110"); !strings.Contains(r.Stdout, "scsi0: local-lvm:vm-110-disk-0,size=30G\n") || !strings.Contains(r.Stdout, "tags: mgmtctl\n") {
		t.Errorf("VM config:\n%s", r.Stdout)
	}
	// The VM's host key was learned into mgmtctl's own known_hosts.
	kh, err := os.ReadFile(filepath.Join(e.LaptopHome(), ".config/mgmtctl/known_hosts"))
	if err != nil || !strings.Contains(string(kh), strings.Fields(e.VMHostKey(110))[1]) {
		t.Errorf("VM host key not recorded: %q %v", kh, err)
	}
}

func TestVMDrift(t *testing.T) {
	t.Parallel()
	e := start(t)
	mustSucceed(t, e.apply("--tags", "vm"), "apply")

	// A stopped VM is started.
	mustSucceed(t, e.PVE("qm stop 110"), "qm stop")
	r := e.apply("--tags", "vm")
	mustSucceed(t, r, "apply after stop")
	if !strings.Contains(r.Stdout, "changed: [pve] vm/start-vm: start VM 110") || !strings.Contains(recap(t, r), "changed=1 ") {
		t.Errorf("stopped VM:\n%s", r.Stdout)
	}
	// A bigger diskGiB grows the disk; nothing else changes.
	e.editConfig("diskGiB: 30", "diskGiB: 40")
	r = e.apply("--tags", "vm")
	mustSucceed(t, r, "apply with a bigger disk")
	if !strings.Contains(r.Stdout, "changed: [pve] vm/grow-disk: grow scsi0 from 30G to 40G") || !strings.Contains(recap(t, r), "changed=1 ") {
		t.Errorf("grow:\n%s", r.Stdout)
	}
	// A smaller diskGiB is an error, never a shrink.
	e.editConfig("diskGiB: 40", "diskGiB: 30")
	r = e.apply("--tags", "vm")
	if r.Code != 1 || !strings.Contains(r.Stderr, "disk is 40G, larger than diskGiB 30; disks are never shrunk") {
		t.Errorf("shrink: exit %d\n%s", r.Code, r.Stderr)
	}
	if r := e.PVE("qm config 110"); !strings.Contains(r.Stdout, "size=40G") {
		t.Errorf("disk changed: %s", r.Stdout)
	}
	// Hardware drift is reported and left alone.
	e.editConfig("diskGiB: 30", "diskGiB: 40")
	e.editConfig("cores: 2", "cores: 4")
	r = e.apply("--tags", "vm")
	mustSucceed(t, r, "apply with drift")
	if !strings.Contains(r.Stdout, `[WARNING] VM 110 cores is "2", config says "4" (left alone)`) || !strings.Contains(recap(t, r), "changed=0") {
		t.Errorf("drift:\n%s", r.Stdout)
	}
}

func TestVMIDTakenByAnotherVM(t *testing.T) {
	t.Parallel()
	e := start(t)
	mustSucceed(t, e.PVE("qm create 110 --name someone-else --memory 1024"), "qm create")
	before := e.pveState()
	// The preflight sees it first; past it, create-vm's own look (the
	// VM could come between the two).
	r := e.apply("--tags", "vm")
	if r.Code != 1 || !strings.Contains(r.Stderr, `proxmox: VMID 110 belongs to another VM on pve (name "someone-else"`) {
		t.Fatalf("exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	r = e.apply("--tags", "vm", "--skip-preflight", "proxmox")
	if r.Code != 1 || !strings.Contains(r.Stderr, `vm/create-vm on pve: check: VMID 110 belongs to another VM (name "someone-else"`) {
		t.Fatalf("exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	// The image step before it may have run; the VM is untouched.
	after := e.pveState()
	for _, l := range strings.Split(before, "\n") {
		if strings.Contains(l, "qemu-server") && !strings.Contains(after, l) {
			t.Errorf("the other VM's config changed")
		}
	}
}

func TestCorruptImage(t *testing.T) {
	t.Parallel()
	e := start(t)
	if err := e.SetFault("corrupt-image", "", true); err != nil {
		t.Fatal(err)
	}
	r := e.apply("--tags", "vm")
	if r.Code != 1 || !strings.Contains(r.Stderr, "sha256 mismatch for https://cloud-images.ubuntu.com/") || !strings.Contains(r.Stderr, "nothing was kept under the final name") {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	if r := e.PVE("qm list; ls -A /var/lib/vz/template/iso"); r.Stdout != "" {
		t.Errorf("left behind: %q", r.Stdout)
	}
	e.SetFault("corrupt-image", "", false)
	mustSucceed(t, e.apply("--tags", "vm"), "apply with a good image")
}

func TestUnknownProxmoxHostKey(t *testing.T) {
	t.Parallel()
	e := start(t)
	os.WriteFile(filepath.Join(e.LaptopHome(), ".ssh/known_hosts"), nil, 0o644)
	r := e.apply("--tags", "vm")
	if r.Code != 4 || !strings.Contains(r.Stderr, "host key of 192.0.2.10 is unknown") {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	if r := e.PVE("qm list"); r.Stdout != "" {
		t.Errorf("something was done: %s", r.Stdout)
	}
}

func TestChangedVMHostKey(t *testing.T) {
	t.Parallel()
	e := start(t)
	mustSucceed(t, e.apply("--tags", "vm"), "apply")
	// Someone else's key for the VM's address: a changed key is refused.
	pve, _ := os.ReadFile(filepath.Join(e.HostDisk("pve"), "ssh_host_ed25519_key.pub"))
	f := strings.Fields(string(pve))
	kh := filepath.Join(e.LaptopHome(), ".config/mgmtctl/known_hosts")
	os.WriteFile(kh, []byte("192.0.2.50 "+f[0]+" "+f[1]+"\n"), 0o600)
	r := e.apply("--tags", "vm")
	if r.Code != 4 || !strings.Contains(r.Stderr, "host key of 192.0.2.50 CHANGED") {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	// A VM this run re-creates brings a new key, which replaces the entry.
	mustSucceed(t, e.PVE("qm stop 110 && qm destroy 110"), "destroy")
	mustSucceed(t, e.apply("--tags", "vm"), "re-create")
	b, _ := os.ReadFile(kh)
	if strings.Contains(string(b), f[1]) || !strings.Contains(string(b), strings.Fields(e.VMHostKey(110))[1]) {
		t.Errorf("known_hosts after re-create: %s", b)
	}
	// A VM mgmtctl did not just create, with no known key: refused
	// unless --accept-new-host-key.
	os.Remove(kh)
	if r := e.apply("--tags", "vm"); r.Code != 4 || !strings.Contains(r.Stderr, "--accept-new-host-key") {
		t.Errorf("unknown VM key: exit %d\n%s", r.Code, r.Stderr)
	}
	mustSucceed(t, e.apply("--tags", "vm", "--accept-new-host-key"), "accept new")
}

// TestKilledAfterCreate: a run killed right after qm create converges on
// the next run, with one VM, and the run after that changes nothing.
func TestKilledAfterCreate(t *testing.T) {
	t.Parallel()
	e := start(t)
	e.killWhen("vm", filepath.Join(e.Pmxcfs(), "nodes/pve/qemu-server/110.conf"), "qm create")
	r := e.apply("--tags", "vm")
	mustSucceed(t, r, "apply after kill")
	if strings.Contains(r.Stdout, "vm/create-vm: create") {
		t.Errorf("VM created twice:\n%s", r.Stdout)
	}
	if r := e.PVE("qm list | wc -l"); strings.TrimSpace(r.Stdout) != "2" {
		t.Errorf("qm list: %q", r.Stdout)
	}
	if got := recap(t, e.apply("--tags", "vm")); !strings.Contains(got, "changed=0") {
		t.Errorf("third run: %s", got)
	}
}

// TestProxmoxDropsOffTheNetwork: a node that stops answering is reported
// as unreachable (exit 4) after bounded retries; once it is back, the run
// converges.
func TestProxmoxDropsOffTheNetwork(t *testing.T) {
	t.Parallel()
	e := start(t)
	if err := e.SetFault("drop-connections", "pve", true); err != nil {
		t.Fatal(err)
	}
	r := e.apply("--tags", "vm")
	if r.Code != 4 || !strings.Contains(r.Stderr, "connect to pve (192.0.2.10:22)") || !strings.Contains(r.Stderr, "after 4 attempts") {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	if err := e.SetFault("drop-connections", "", false); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, e.apply("--tags", "vm"), "apply once the node is back")
}

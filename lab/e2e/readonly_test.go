package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/mgmtctl/mgmtctl/lab/internal/lab"
)

// diskState is every file under the laptop's home, the Proxmox node's
// /etc (with the cluster's /etc/pve) and the VM's /etc and
// /var/lib/rancher, as they sit on the hosts' disks: path, mode and a
// hash of the content. Left out: what changes by itself, the datastore k3s
// writes to all the time (server/db), and the run's own debug log, a
// cache file that is the record of the run.
func (e *env) diskState() map[string]string {
	e.t.Helper()
	roots := map[string]string{
		"laptop:~":        e.LaptopHome(),
		"pve:/etc":        filepath.Join(e.HostDisk("pve"), "upper/etc"),
		"pve:/etc/pve":    e.Pmxcfs(),
		"vm:/etc":         filepath.Join(e.VMDisk(lab.VMID), "upper/etc"),
		"vm:/var/lib/k3s": filepath.Join(e.VMDisk(lab.VMID), "upper/var/lib/rancher"),
	}
	skip := []string{"k3s/server/db/", ".cache/mgmtctl/runs/"}
	state := map[string]string{}
	for name, root := range roots {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			for _, s := range skip {
				if strings.HasPrefix(rel+"/", s) {
					if d.IsDir() {
						return filepath.SkipDir
					}
					return nil
				}
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			v := info.Mode().String()
			if info.Mode().IsRegular() {
				b, _ := os.ReadFile(p)
				sum := sha256.Sum256(b)
				v += " " + hex.EncodeToString(sum[:8])
			} else if info.Mode()&fs.ModeSymlink != 0 {
				l, _ := os.Readlink(p)
				v += " -> " + l
			}
			state[name+"/"+rel] = v
			return nil
		})
	}
	return state
}

// diffStates lists what differs between two disk states.
func diffStates(before, after map[string]string) string {
	var out []string
	for k, v := range before {
		if w, ok := after[k]; !ok {
			out = append(out, "removed "+k)
		} else if w != v {
			out = append(out, fmt.Sprintf("changed %s: %s -> %s", k, v, w))
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			out = append(out, "added "+k)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// readOnlyRuns runs plan (with and without --detailed-exitcode) and
// status (text and JSON), checks each exit code against the README's
// table for the state, and fails the test if any of them changed a file on
// the laptop, the node or the VM.
func (e *env) readOnlyRuns(t *testing.T, what string, wantPlan, wantStatus int) {
	t.Helper()
	before := e.diskState()
	// Without --detailed-exitcode, pending changes are success.
	wantPlain := wantPlan
	if wantPlain == 3 {
		wantPlain = 0
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"plan", "--detailed-exitcode"}, wantPlan},
		{[]string{"plan"}, wantPlain},
		{[]string{"status"}, wantStatus},
		{[]string{"status", "-o", "json"}, wantStatus},
	} {
		if r := e.mgmtctl(c.args...); r.Code != c.want {
			t.Errorf("%s: %s exit %d, want %d\n%s\n%s", what, strings.Join(c.args, " "), r.Code, c.want, r.Stdout, r.Stderr)
		}
	}
	if d := diffStates(before, e.diskState()); d != "" {
		t.Errorf("%s: plan and status wrote:\n%s", what, d)
	}
}

// TestPlanAndStatusWriteNothing: plan and status exit as the README's
// table says, and leave every file of the laptop, the node and the VM byte
// for byte as they found it, on a degraded lab, one whose VM was
// re-created and never reached, and one whose VM never booted. (On a
// converged lab: TestConverged.)
func TestPlanAndStatusWriteNothing(t *testing.T) {
	t.Parallel()
	e := startConverged(t)

	// Degraded: k3s stopped on the VM.
	if r := e.vmSSH("sudo systemctl stop k3s"); r.Code != 0 {
		t.Fatalf("stop k3s: %+v", r)
	}
	// k3s stopped: the addons' check cannot read the cluster's API, so
	// plan fails (1, with or without --detailed-exitcode); unhealthy (1).
	e.readOnlyRuns(t, "k3s stopped", 1, 1)

	// The VM destroyed by hand, and a run that re-creates it killed right
	// after qm create: mgmtctl's record says the VM is new, and the
	// create plan forgot the old VM's key before qm create ran.
	if r := e.PVE("qm stop 110 && qm destroy 110"); r.Code != 0 {
		t.Fatalf("qm destroy: %+v", r)
	}
	e.killWhen("vm", filepath.Join(e.Pmxcfs(), "nodes/pve/qemu-server/110.conf"), "qm create")
	kh, _ := os.ReadFile(filepath.Join(e.LaptopHome(), ".config/mgmtctl/known_hosts"))
	if strings.Contains(string(kh), lab.VMAddr) {
		t.Fatalf("the old VM's key is still in mgmtctl's known_hosts:\n%s", kh)
	}
	// A VM created and not started: its start pending (3), unhealthy (1).
	e.readOnlyRuns(t, "VM re-created, never reached", 3, 1)

	// A VM that never booted: started, its guest silent, and an apply
	// that waited for it to the end of its bound (exit 4) and recorded
	// that in mgmtctl's record of the new VM. plan and status see the reset
	// the next apply makes: pending (3), not as configured (1); and they
	// write nothing, that record included.
	if err := e.SetFault("fail-boot", "", true); err != nil {
		t.Fatal(err)
	}
	if r := e.apply("--tags", "vm", "--wait-timeout", "20s"); r.Code != 4 || !strings.Contains(r.Stdout, "failed: [lab-mgmt] vm/wait-ssh") {
		t.Fatalf("apply on a VM that never boots: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	r := e.mgmtctl("plan")
	if !strings.Contains(r.Stdout, "vm/wait-ssh: reset VM 110: up ") {
		t.Errorf("plan does not show the reset:\n%s", r.Stdout)
	}
	e.readOnlyRuns(t, "VM never booted", 3, 1)
}

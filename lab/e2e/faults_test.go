package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/lab/internal/lab"
	"github.com/mgmtctl/mgmtctl/lab/labtest"
)

// The faults of a run that used to hang or stick: each gives a bounded,
// clear failure with its exit code, and once the fault is cleared one
// apply converges and the next changes nothing.

// TestFaultsInTurn: faults of a first apply, one after another in one
// lab (each fresh lab is a VM booted and k3s installed, a quarter of a
// core's minute on a suite bound by CPU, docs/testing.md), each met where
// a first run meets it:
//   - a VM whose guest never comes up fails the run at the wait's bound
//     (exit 4, the VM unreachable) saying where to look; once the cause
//     is gone, the next apply resets the VM it created and never
//     reached, and converges;
//   - a helm-install Job that fails is retried by helm-controller; the
//     run waits through the retries to its bound and then fails with
//     helm's message;
//   - with that fault gone, a run waits for the next retry, and is killed
//     right after it wrote the operator's HelmChart (while it waits for
//     the chart): the next run converges without writing it again, and
//     also applies the providers; the run after that changes nothing.
func TestFaultsInTurn(t *testing.T) {
	t.Parallel()
	e := start(t)
	if err := e.SetFault("fail-boot", "", true); err != nil {
		t.Fatal(err)
	}
	r := e.apply("--wait-timeout", "20s")
	for _, want := range []string{"VM 110 is running but did not answer SSH on 192.0.2.50:22 within 20s",
		"qm terminal 110 on pve", "the next apply resets it (qm reset 110)"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("the failure does not say %q", want)
		}
	}
	if r.Code != 4 || !strings.Contains(r.Stdout, "failed: [lab-mgmt] vm/wait-ssh") {
		t.Fatalf("exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if st := e.PVE("qm status 110"); st.Stdout != "status: running\n" {
		t.Errorf("qm status: %q", st.Stdout)
	}
	if err := e.SetFault("fail-boot", "", false); err != nil {
		t.Fatal(err)
	}
	r = e.apply("--tags", "vm,k3s")
	mustSucceed(t, r, "apply once the VM boots")
	if !strings.Contains(r.Stdout, "reset VM 110") {
		t.Errorf("the hung VM was not reset:\n%s", r.Stdout)
	}

	// A chart whose helm-install Job keeps failing.
	if err := e.SetFault("helm-fail", "cert-manager", true); err != nil {
		t.Fatal(err)
	}
	// While that run waits, holding the node's and the VM's run locks,
	// the read-only commands run: none takes a lock.
	applied := make(chan labtest.Result, 1) // the run ends even if the test stops first
	go func() { applied <- e.apply("--wait-timeout", "20s") }()
	held := func() bool { return e.PVE("flock -n /run/mgmtctl.lock true").Code == 1 }
	for deadline := time.Now().Add(time.Minute); !held(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the run never held the node's lock")
		}
	}
	for _, args := range [][]string{{"status"}, {"backup", "--list"}, {"plan", "--tags", "vm,k3s"}, {"proxmox", "role"}} {
		if r := e.mgmtctl(args...); r.Code == 4 || strings.Contains(r.Stdout+r.Stderr, "locked by another mgmtctl run") || (args[0] != "status" && r.Code != 0) {
			t.Errorf("mgmtctl %s while an apply runs: exit %d\n%s\n%s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
		}
	}
	if !held() {
		t.Error("the run no longer held the node's lock after the read-only commands: they did not overlap it")
	}
	r = <-applied
	if r.Code != 1 || !strings.Contains(r.Stdout, "failed: [lab-mgmt] addons/cert-manager-chart") ||
		!regexp.MustCompile(`cert-manager v[0-9.]+ not usable after 20s: its helm-install Job kept failing while helm-controller retried it`).MatchString(r.Stderr) ||
		!strings.Contains(r.Stderr, "helm-fail") || !strings.Contains(r.Stderr, "BackOff") {
		t.Fatalf("exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if err := e.SetFault("helm-fail", "", false); err != nil {
		t.Fatal(err)
	}

	// The fault gone, a run waits for helm-controller's next retry, and
	// is killed once it wrote the operator's HelmChart.
	e.killWhen("addons,capi", filepath.Join(e.VMDisk(lab.VMID), "upper/var/lib/rancher/k3s/server/manifests/cluster-api-operator.yaml"), "the operator's HelmChart write")
	r = e.apply()
	mustSucceed(t, r, "apply after kill")
	if strings.Contains(r.Stdout, "addons/cluster-api-operator-chart: create") {
		t.Errorf("the chart written before the kill was written again:\n%s", r.Stdout)
	}
	if got := recap(t, e.apply()); !strings.Contains(got, "changed=0") {
		t.Errorf("next run: %s", got)
	}
	r = e.adminKubectl("get", allProviders, "-A", "-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{end}`)
	if r.Stdout != "TrueTrueTrueTrueTrue" {
		t.Errorf("providers Ready: %+v", r)
	}
}

// TestChangedVMKeyBeforeAnyChange: the VM's host key is checked when the
// vm phase gathers its facts, so a changed key stops the run before the
// missing image is downloaded again; status exits 4 for it, as apply.
func TestChangedVMKeyBeforeAnyChange(t *testing.T) {
	t.Parallel()
	e := start(t)
	mustSucceed(t, e.apply("--tags", "vm"), "apply")
	kh := filepath.Join(e.LaptopHome(), ".config/mgmtctl/known_hosts")
	good, err := os.ReadFile(kh)
	if err != nil {
		t.Fatal(err)
	}
	pve, _ := os.ReadFile(filepath.Join(e.HostDisk("pve"), "ssh_host_ed25519_key.pub"))
	f := strings.Fields(string(pve))
	os.WriteFile(kh, []byte("192.0.2.50 "+f[0]+" "+f[1]+"\n"), 0o600)
	mustSucceed(t, e.PVE("rm -f /var/lib/vz/template/iso/*.img /var/lib/vz/template/iso/*.img.sha256"), "remove the image and its recorded sum")

	r := e.apply("--tags", "vm")
	if r.Code != 4 || !strings.Contains(r.Stderr, "host key of 192.0.2.50 CHANGED") || !strings.Contains(r.Stdout, "failed: [pve] vm/gather-facts") {
		t.Fatalf("exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if r := e.PVE("ls -A /var/lib/vz/template/iso"); r.Stdout != "" {
		t.Errorf("the image was downloaded before the key was checked: %q", r.Stdout)
	}
	// status classes it as apply does: exit 4.
	if r := e.mgmtctl("status"); r.Code != 4 || !strings.Contains(r.Stdout+r.Stderr, "host key of 192.0.2.50 CHANGED") {
		t.Errorf("status with a changed key: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	os.WriteFile(kh, good, 0o600)
	mustSucceed(t, e.apply("--tags", "vm"), "apply with the right key")
	if got := recap(t, e.apply("--tags", "vm")); !strings.Contains(got, "changed=0") {
		t.Errorf("next run: %s", got)
	}
}

// TestDroppedDownload: the mirror drops the image download halfway; the
// run says what failed (the download of that URL, curl's words), not the
// script, which is in the debug log; nothing is left under the image's
// name; the next apply converges.
func TestDroppedDownload(t *testing.T) {
	t.Parallel()
	e := start(t)
	if err := e.SetFault("reset-download", "", true); err != nil {
		t.Fatal(err)
	}
	r := e.apply("--tags", "vm")
	if r.Code != 1 || !regexp.MustCompile(`image /var/lib/vz/template/iso/\S+\.img: download https://cloud-images\.ubuntu\.com/\S+ exited \d+: curl: \(\d+\) .*(reset|Reset)`).MatchString(r.Stderr) {
		t.Fatalf("exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if strings.Contains(r.Stdout+r.Stderr, "set -eu") || strings.Count(strings.TrimSpace(r.Stderr), "\n") > 4 {
		t.Errorf("the failure dumps the script:\n%s", r.Stderr)
	}
	if !strings.Contains(debugLog(t, r.Stdout+r.Stderr), "set -eu") {
		t.Errorf("the debug log lacks the script")
	}
	if r := e.PVE("ls -A /var/lib/vz/template/iso"); r.Stdout != "" {
		t.Errorf("left behind: %q", r.Stdout)
	}
	if err := e.SetFault("reset-download", "", false); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, e.apply("--tags", "vm"), "apply once the mirror holds")
	if got := recap(t, e.apply("--tags", "vm")); !strings.Contains(got, "changed=0") {
		t.Errorf("next run: %s", got)
	}
}

// debugLog reads the debug log a failed run named.
func debugLog(t *testing.T, stderr string) string {
	t.Helper()
	m := regexp.MustCompile(`(/\S+/\.cache/mgmtctl/runs/\S+\.log)`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no debug log named:\n%s", stderr)
	}
	b, err := os.ReadFile(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

package e2e

import (
	"strings"
	"testing"
)

// TestPreflight: on a fresh lab, what apply would fail at half-way is
// refused before its first change, the lab's Proxmox byte-identical: a
// phase asked for before the VM it needs exists, and a k3s pin that is
// not released. `mgmtctl preflight` names each check. Then, with k3s
// v1.34 installed, a pin of v1.36 (a minor skipped) is refused before
// the backup a k3s upgrade takes.
func TestPreflight(t *testing.T) {
	t.Parallel()
	e := start(t)
	before := e.pveState()
	r := e.apply("--tags", "capi")
	if r.Code != 1 || !strings.Contains(r.Stderr, "prerequisites: VM 110 (lab-mgmt) does not exist yet on pve: run `mgmtctl apply` (or `--tags vm,k3s`) first") {
		t.Errorf("apply --tags capi on a fresh lab: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	e.editConfig("  kubeconfig:", "  k3s:\n    version: v1.35.99+k3s1\n  kubeconfig:")
	r = e.apply()
	if r.Code != 1 || !strings.Contains(r.Stderr, "k3s-release: spec.k3s.version v1.35.99+k3s1 is not a k3s release (https://github.com/k3s-io/k3s/releases lists them): https://github.com/k3s-io/k3s/releases/download/v1.35.99+k3s1/sha256sum-amd64.txt answers 404 Not Found") ||
		strings.Contains(r.Stdout, "changed:") {
		t.Errorf("apply with a k3s pin not released: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if after := e.pveState(); after != before {
		t.Errorf("a refused run changed the lab's Proxmox")
	}
	r = e.mgmtctl("preflight")
	for _, want := range []string{"ok: preflight/image: https://cloud-images.ubuntu.com/", "ok: preflight/k3s-installer: https://get.k3s.io",
		"ok: preflight/chart-cert-manager: cert-manager v1.21.2 in https://charts.jetstack.io", "failed: preflight/k3s-release: spec.k3s.version v1.35.99+k3s1"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("preflight lacks %q:\n%s", want, r.Stdout)
		}
	}
	if r.Code != 1 {
		t.Errorf("preflight with a failed check: exit %d", r.Code)
	}

	// A k3s bump that skips a minor is refused before its backup, with
	// nothing changed.
	e.editConfig("v1.35.99+k3s1", "v1.34.10+k3s1")
	mustSucceed(t, e.apply("--tags", "vm,k3s"), "k3s v1.34")
	e.editConfig("v1.34.10+k3s1", "v1.36.3+k3s1")
	r = e.apply("--tags", "vm,k3s")
	if r.Code != 1 || !strings.Contains(r.Stderr, "k3s v1.34.10+k3s1 is installed on lab-mgmt; the pinned v1.36.3+k3s1 skips v1.35: k3s, as Kubernetes, upgrades one minor version at a time") ||
		strings.Contains(r.Stdout, "changed:") || !strings.Contains(recap(t, r), "changed=0 ") {
		t.Errorf("a k3s bump skipping a minor: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
}

package e2e

import (
	"strings"
	"testing"

	"github.com/mgmtctl/mgmtctl/lab/internal/lab"
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
	if !strings.Contains(r.Stdout, "ok: preflight/provider-contracts: cluster-api v1beta2, bootstrap-kubeadm v1beta2, control-plane-kubeadm v1beta2, infrastructure-proxmox v1beta2, ipam-in-cluster v1beta2") {
		t.Errorf("preflight's contracts:\n%s", r.Stdout)
	}

	// Core Cluster API of a v1beta1 series beside v1beta2 providers: the
	// operator would install them; clusterctl refuses, and so does apply.
	e.editConfig("  kubeconfig:", "  providers:\n    - {type: core, name: cluster-api, version: v1.8.4}\n    - {type: bootstrap, name: kubeadm, version: v1.12.11}\n"+
		"    - {type: controlPlane, name: kubeadm, version: v1.12.11}\n    - {type: infrastructure, name: proxmox, version: v0.9.1}\n    - {type: ipam, name: in-cluster, version: v1.1.1}\n  kubeconfig:")
	r = e.apply()
	if r.Code != 1 || !strings.Contains(r.Stderr, `provider-contracts: the pinned providers do not agree (spec.providers; each release's metadata.yaml): installing provider "bootstrap-kubeadm" could lead to a non functioning management cluster: the target version for the provider implements the v1beta2 contract version, while the core provider is compatible with v1beta1 contract versions`) ||
		strings.Contains(r.Stdout, "changed:") {
		t.Errorf("apply with a v1beta1 core: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	e.editConfig("version: v1.8.4}", "version: v1.12.11}")

	// kube-vip's image, with a VIP: a tag its registry does not have is
	// refused, the pinned one found (ghcr.io's token flow, then the
	// manifest).
	e.editConfig("  kubeconfig:", "  vip:\n    address: 192.0.2.60\n    version: v9.9.9\n  kubeconfig:")
	r = e.mgmtctl("preflight")
	if r.Code != 1 || !strings.Contains(r.Stdout, "failed: preflight/kube-vip-image: spec.vip.version v9.9.9: ghcr.io/kube-vip/kube-vip:v9.9.9 is not in its registry") {
		t.Errorf("a kube-vip tag not released: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	e.editConfig("version: v9.9.9", "version: v1.2.3")
	if r = e.mgmtctl("preflight"); !strings.Contains(r.Stdout, "ok: preflight/kube-vip-image: ghcr.io/kube-vip/kube-vip:v1.2.3") {
		t.Errorf("the pinned kube-vip image: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	e.editConfig("  vip:\n    address: 192.0.2.60\n    version: v1.2.3\n", "")
	if after := e.pveState(); after != before {
		t.Errorf("a refused run changed the lab's Proxmox")
	}

	// The Proxmox side, before anything is made there: a bridge the node
	// does not have, a disk bigger than the thin pool's free space, an
	// address another machine answers at (the mirror's), a VMID another
	// VM holds.
	e.editConfig("  k3s:\n    version: v1.35.99+k3s1\n", "")
	for _, tc := range []struct{ from, to, want string }{
		{"bridge: vmbr0", "bridge: vmbr9", "proxmox: bridge vmbr9 does not exist on pve (spec.vm.bridge; the node's /etc/network/interfaces)"},
		{"diskGiB: 30", "diskGiB: 300", "proxmox: storage local-lvm on pve has 256G free, and the VM's disk needs 300G (spec.vm.diskGiB)"},
		{"address: 192.0.2.50/24", "address: " + lab.MirrorAddr + "/24", "proxmox: " + lab.MirrorAddr + " already answers (its port 22): another machine has the address spec.vm.address gives the VM"},
	} {
		e.editConfig(tc.from, tc.to)
		r := e.apply()
		if r.Code != 1 || !strings.Contains(r.Stderr, tc.want) || strings.Contains(r.Stdout, "changed:") {
			t.Errorf("%s: exit %d\n%s\n%s", tc.to, r.Code, r.Stdout, r.Stderr)
		}
		e.editConfig(tc.to, tc.from)
	}
	mustSucceed(t, e.PVE("qm create 110 --name someone-else --memory 1024"), "another VM at 110")
	taken := e.pveState()
	if r := e.apply(); r.Code != 1 || !strings.Contains(r.Stderr, `proxmox: VMID 110 belongs to another VM on pve (name "someone-else", tags "")`) {
		t.Errorf("a VMID taken: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if e.pveState() != taken {
		t.Errorf("a run refused for a taken VMID changed the lab's Proxmox")
	}
	mustSucceed(t, e.PVE("qm destroy 110"), "remove the other VM")
	e.editConfig("  kubeconfig:", "  k3s:\n    version: v1.35.99+k3s1\n  kubeconfig:")

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

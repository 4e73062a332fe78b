package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/lab/internal/lab"
	"github.com/mgmtctl/mgmtctl/lab/labtest"
)

// startHA brings up a three-node Proxmox cluster and points the env at
// its highly available config.
func startHA(t testing.TB) *env {
	labtest.Skip(t)
	return haEnv(t, labtest.StartNodes(t, 3))
}

// haEnv is the env of a three-node lab, pointed at its highly available
// config.
func haEnv(t testing.TB, l *labtest.Lab) *env {
	b, err := os.ReadFile(l.HAConfigPath())
	if err != nil {
		t.Fatal(err)
	}
	// The env's commands use ConfigPath: make it the HA config.
	if err := os.WriteFile(l.ConfigPath(), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return newEnv(t, l)
}

// raceChecked is the tool the test runs: with MGMTCTL_E2E_RACE set (make
// test-race-e2e), the tool built with the race detector, behind a script
// that has each run write the detector's reports into a directory of the
// test's (GORACE log_path: a file per process, so a run the test kills
// leaves what it found too), and the test fails at its end with every
// report there; else the plain build. TestHA and TestHARestore run it: a
// cluster of servers is where mgmtctl's Checks, dials and waits run side
// by side, and those two cover a first apply, a rolling change behind the
// quorum gate, a restore and its rejoins. Not in make test: the detector
// makes the tool several times slower and heavier, on a suite already
// CPU-bound on 2 cores (docs/testing.md).
func raceChecked(t testing.TB, plain string) string {
	if os.Getenv("MGMTCTL_E2E_RACE") == "" {
		return plain
	}
	dir := t.TempDir()
	reports := filepath.Join(dir, "race")
	script := filepath.Join(dir, "mgmtctl")
	body := fmt.Sprintf("#!/bin/sh\nGORACE='log_path=%s' exec '%s' \"$@\"\n", reports, labtest.MgmtctlRace(t))
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		found, _ := filepath.Glob(reports + ".*")
		for _, f := range found {
			b, _ := os.ReadFile(f)
			t.Errorf("mgmtctl's race detector (%s):\n%s", filepath.Base(f), b)
		}
	})
	return script
}

// viaVIP runs kubectl with the admin kubeconfig mgmtctl wrote, whose
// server is the VIP.
func (e *env) viaVIP(args ...string) labtest.Result {
	e.t.Helper()
	kc := filepath.Join(e.LaptopHome(), ".kube/lab-mgmt.kubeconfig")
	return e.Run("", append([]string{labtest.Kubectl(e.t), "--kubeconfig", kc, "--request-timeout", "5s"}, args...)...)
}

// probeEvery is how often probing asks: the outages it looks for (the
// VIP's failover, a provider not Ready) last seconds, and a kubectl
// started back to back kept a core busy for the whole apply, which the
// suite's other labs on 2 cores paid for.
const probeEvery = 500 * time.Millisecond

// probing runs run while kubectl through the VIP runs args again and
// again, probeEvery apart, each result handed to seen (from one
// goroutine, in order).
func (e *env) probing(run func(), seen func(labtest.Result), args ...string) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(probeEvery)
		defer tick.Stop()
		for {
			seen(e.viaVIP(args...))
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	run()
	close(stop)
	<-done
}

const readyNodes = `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status},{.metadata.labels.node-role\.kubernetes\.io/etcd} {end}`

// TestHA: three servers on three Proxmox nodes. A fresh apply converges
// (three Ready servers, three healthy etcd members, the providers Ready
// through the VIP) and a second changes nothing; the cluster token is
// never printed. The fresh apply is haBackedUp's (the template the
// restores start from too: one first apply of three servers for all of
// them), and the test starts from a copy of what it converged. The VM
// holding the VIP stopped: the API answers at the VIP again from another
// server, status exits 1 naming the stopped server, and the next apply
// starts it and converges. A k3s version bump rolls one server at a
// time, each Ready before the next is touched.
func TestHA(t *testing.T) {
	t.Parallel()
	e := haEnv(t, haBackedUp.Start(t))
	e.bin = raceChecked(t, e.bin)
	token := strings.TrimSpace(e.SSH("ubuntu", "192.0.2.50", filepath.Join(e.LaptopHome(), ".config/mgmtctl/known_hosts"), "sudo cat /var/lib/rancher/k3s/server/token").Stdout)
	if !strings.HasPrefix(token, "K10") {
		t.Fatalf("cluster token: %q", token)
	}
	r := e.apply("--diff")
	mustSucceed(t, r, "second apply")
	if !strings.Contains(recap(t, r), "changed=0 ") {
		t.Errorf("second run changed something:\n%s", r.Stdout)
	}
	noSecret(t, r, token)
	if r := e.viaVIP("get", "nodes", "-o", readyNodes); r.Stdout != "lab-mgmt=True,true lab-mgmt-2=True,true lab-mgmt-3=True,true " {
		t.Fatalf("nodes through the VIP: %+v", r)
	}
	if r := e.viaVIP("get", allProviders, "-A", "-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{end}`); r.Stdout != "TrueTrueTrueTrueTrue" {
		t.Errorf("providers through the VIP: %+v", r)
	}
	// kube-vip runs as its DaemonSet's pods, one per server, on the
	// node's address (hostNetwork), with its ServiceAccount: the holder's
	// container log says it took the address. Other pods have addresses
	// of their own, from their node's pod CIDR.
	if r := e.viaVIP("-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=kube-vip-ds", "-o",
		`jsonpath={range .items[*]}{.spec.nodeName}={.status.phase},{.status.containerStatuses[0].ready} {end}`); strings.Count(r.Stdout, "=Running,true ") != 3 {
		t.Errorf("kube-vip's pods: %+v", r)
	}
	vipHolder := e.viaVIP("get", "lease", "-n", "kube-system", "plndr-cp-lock", "-o", "jsonpath={.spec.holderIdentity}").Stdout
	vipPod := e.viaVIP("-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=kube-vip-ds", "--field-selector", "spec.nodeName="+vipHolder, "-o", "name").Stdout
	if r := e.viaVIP("-n", "kube-system", "logs", strings.TrimSpace(vipPod)); !strings.Contains(r.Stdout, vipHolder+" is assuming leadership of the cluster, "+lab.VIPAddr) {
		t.Errorf("kubectl logs %s (the VIP's holder %s): %+v", vipPod, vipHolder, r)
	}
	// Upstream's node IPAM gives each Node a /24 of the cluster CIDR, any
	// free one (a Node registered twice may skip one).
	cidrs := strings.Fields(e.viaVIP("get", "nodes", "-o", `jsonpath={range .items[*]}{.spec.podCIDR} {end}`).Stdout)
	distinct := map[string]bool{}
	for _, c := range cidrs {
		if regexp.MustCompile(`^10\.42\.\d+\.0/24$`).MatchString(c) {
			distinct[c] = true
		}
	}
	if len(cidrs) != 3 || len(distinct) != 3 {
		t.Errorf("the nodes' pod CIDRs: %v, want three distinct /24s of 10.42.0.0/16", cidrs)
	}
	b, _ := os.ReadFile(filepath.Join(e.LaptopHome(), ".kube/lab-mgmt.kubeconfig"))
	if !strings.Contains(string(b), "server: https://"+lab.VIPAddr+":6443") {
		t.Errorf("admin kubeconfig is not at the VIP:\n%s", b)
	}
	rep, code, out := e.status()
	if code != 0 || !rep.Healthy || !strings.Contains(out, "3/3 members healthy (lab-mgmt, lab-mgmt-2, lab-mgmt-3)") {
		t.Errorf("status of the converged cluster: exit %d\n%s", code, out)
	}

	// Stop the VM holding the VIP.
	holder := e.viaVIP("get", "lease", "-n", "kube-system", "plndr-cp-lock", "-o", "jsonpath={.spec.holderIdentity}").Stdout
	i := map[string]int{"lab-mgmt": 0, "lab-mgmt-2": 1, "lab-mgmt-3": 2}[holder]
	if holder == "" {
		t.Fatal("nobody holds the VIP")
	}
	node := e.Nodes()[i].Name
	stopped := time.Now()
	if r := e.OnNode(node, fmt.Sprintf("qm stop %d", lab.VMID+i)); r.Code != 0 {
		t.Fatal(r)
	}
	// kubectl's own timeout paces the tries; the bound is generous, the
	// time is logged (speed is the benchmark's business).
	var back time.Duration
	for time.Since(stopped) < 90*time.Second {
		if r := e.viaVIP("get", "nodes", "-o", "name"); r.Code == 0 {
			back = time.Since(stopped)
			break
		}
	}
	if back == 0 {
		t.Fatalf("the API does not answer at the VIP after %s stopped", holder)
	}
	t.Logf("API back at the VIP %s after %s stopped", back.Round(100*time.Millisecond), holder)
	// Upstream's controllers on the servers left: the controller
	// manager's Lease is held by a running server, whose node lifecycle
	// controller marks the stopped server's Node NotReady once its kubelet
	// has been silent for the grace period (50 s).
	var notReady time.Duration
	for time.Since(stopped) < 3*time.Minute {
		r := e.viaVIP("get", "node", holder, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if r.Stdout == "Unknown" {
			notReady = time.Since(stopped)
			break
		}
		time.Sleep(2 * time.Second)
	}
	if notReady == 0 {
		t.Errorf("the Node of the stopped server %s is not NotReady after 3 minutes", holder)
	}
	t.Logf("Node %s NotReady %s after it stopped", holder, notReady.Round(time.Second))
	if r := e.viaVIP("-n", "kube-system", "get", "lease", "kube-controller-manager", "-o", "jsonpath={.spec.holderIdentity}"); r.Code != 0 || strings.HasPrefix(r.Stdout, holder+"_") {
		t.Errorf("the controller manager's Lease with %s stopped: %+v", holder, r)
	}
	// helm-controller runs on whichever server holds the k3s Lease (45 s
	// lease): with the stopped server out of it, a HelmChart's Job that
	// goes is made again and runs to completion on the servers left.
	var k3sLeader string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		if k3sLeader = e.viaVIP("-n", "kube-system", "get", "lease", "k3s", "-o", "jsonpath={.spec.holderIdentity}").Stdout; k3sLeader != "" && k3sLeader != holder {
			break
		}
	}
	if k3sLeader == "" || k3sLeader == holder {
		t.Errorf("the k3s Lease with %s stopped is held by %q", holder, k3sLeader)
	}
	mustSucceed(t, e.viaVIP("-n", "kube-system", "delete", "job", "helm-install-cert-manager", "--wait=true"), "delete cert-manager's helm Job")
	var done string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		if done = e.viaVIP("-n", "kube-system", "get", "job", "helm-install-cert-manager", "-o", `jsonpath={.status.conditions[?(@.type=="Complete")].status}`).Stdout; done == "True" {
			break
		}
	}
	if done != "True" {
		t.Errorf("cert-manager's helm Job was not made again and completed with helm-controller on %s: %q", k3sLeader, done)
	}
	t.Logf("helm-controller's leader with %s stopped: %s", holder, k3sLeader)
	rep, code, out = e.status()
	if code != 1 || !strings.Contains(rep.unhealthy(), "vm/start-vm") || !strings.Contains(out, fmt.Sprintf("start VM %d (%s)", lab.VMID+i, holder)) ||
		!strings.Contains(out, "degraded, 2/3 members healthy, quorum kept; "+holder+": ") {
		t.Errorf("status with %s stopped: exit %d\n%s", holder, code, out)
	}
	r = e.apply()
	mustSucceed(t, r, "apply with a server stopped")
	if !strings.Contains(r.Stdout, fmt.Sprintf("changed: [%s] vm/start-vm: start VM %d (%s)", node, lab.VMID+i, holder)) || !strings.Contains(recap(t, r), "changed=1 ") {
		t.Errorf("apply did not just start the stopped VM:\n%s", r.Stdout)
	}
	if rep, code, out := e.status(); code != 0 || !rep.Healthy {
		t.Errorf("status after the server rejoined: exit %d\n%s", code, out)
	}

	// A member down (k3s stopped on the third server): a version bump
	// stops before any server is touched, naming it.
	kh := filepath.Join(e.LaptopHome(), ".config/mgmtctl/known_hosts")
	if r := e.SSH("ubuntu", "192.0.2.52", kh, "sudo systemctl stop k3s"); r.Code != 0 {
		t.Fatal(r)
	}
	e.editConfig("  kubeconfig:", "  k3s:\n    version: v1.36.3+k3s1\n  kubeconfig:")
	r = e.apply()
	if r.Code != 1 || !strings.Contains(r.Stdout+r.Stderr, "etcd member lab-mgmt-3 (") || !strings.Contains(r.Stdout+r.Stderr, "only while every other member is healthy") ||
		!strings.Contains(recap(t, r), "changed=0 ") {
		t.Errorf("upgrade with a member down: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if r := e.viaVIP("get", "nodes", "-o", "jsonpath={range .items[*]}{.status.nodeInfo.kubeletVersion} {end}"); strings.Contains(r.Stdout, "v1.36.3") {
		t.Errorf("a server was upgraded with a member down: %+v", r)
	}
	if r := e.SSH("ubuntu", "192.0.2.52", kh, "sudo systemctl start k3s"); r.Code != 0 {
		t.Fatal(r)
	}

	// With every member back, the version bump rolls: each server's
	// upgrade is waited for (its node Ready) before the next server is
	// touched, and the API stays up but for the VIP's failover.
	var probes, failed int
	e.probing(func() { r = e.apply("-o", "json") }, func(r labtest.Result) {
		probes++
		if r.Code != 0 {
			failed++
		}
	}, "get", "--raw", "/readyz")
	mustSucceed(t, r, "apply of the version bump")
	t.Logf("API at the VIP during the rolling upgrade: %d of %d probes failed", failed, probes)
	order := stepOrder(t, r.Stdout, "k3s")
	want := []string{"lab-mgmt install", "lab-mgmt node-ready", "lab-mgmt-2 install", "lab-mgmt-2 node-ready", "lab-mgmt-3 install", "lab-mgmt-3 node-ready"}
	if got := strings.Join(order, ","); got != strings.Join(want, ",") {
		t.Errorf("rolling order: %s\nwant %s", got, strings.Join(want, ","))
	}
	if r := e.viaVIP("get", "nodes", "-o", "jsonpath={range .items[*]}{.status.nodeInfo.kubeletVersion} {end}"); r.Stdout != "v1.36.3+k3s1 v1.36.3+k3s1 v1.36.3+k3s1 " {
		t.Errorf("versions after the upgrade: %+v", r)
	}
	// The upgrade took a backup first (the refused one took none), into
	// the laptop's backups, saying why: one more than the template's.
	mans, _ := filepath.Glob(filepath.Join(e.LaptopHome(), ".local/share/mgmtctl/backups/lab-mgmt/*/backup.json"))
	var upgrades []string
	for _, m := range mans {
		if b, _ := os.ReadFile(m); strings.Contains(string(b), `"reason": "before upgrading k3s from `) {
			upgrades = append(upgrades, string(b))
		}
	}
	if len(mans) != 2 || len(upgrades) != 1 {
		t.Fatalf("backups after the upgrade: %v, %d of them before upgrading k3s", mans, len(upgrades))
	}
	if !strings.Contains(upgrades[0], ` to v1.36.3+k3s1"`) {
		t.Errorf("the upgrade's backup: %s", upgrades[0])
	}
	if l := e.mgmtctl("backup", "--list"); !strings.Contains(l.Stdout, "before upgrading k3s from") {
		t.Errorf("backup --list: %+v", l)
	}
}

// stepOrder lists, from apply's JSON events, the install steps that
// changed and the node-ready steps that ended, as "host step", in order.
func stepOrder(t *testing.T, out, phase string) []string {
	t.Helper()
	var order []string
	for _, line := range strings.Split(out, "\n") {
		var ev runEvent
		if json.Unmarshal([]byte(line), &ev) != nil || ev.Phase != phase || ev.Event != "step" {
			continue
		}
		if (ev.Step == "install" && ev.Outcome == "changed") || ev.Step == "node-ready" {
			order = append(order, ev.Host+" "+ev.Step)
		}
	}
	return order
}

// TestHAGrowth: a single server with the VIP (as a user starts who plans
// to grow) becomes three by adding two servers to mgmt.yaml. The first
// server is not restarted (its config.yaml does not change), the new ones
// join it, and the providers stay Ready throughout, as probes through the
// VIP during the growing apply see.
func TestHAGrowth(t *testing.T) {
	t.Parallel()
	e := startHA(t)
	b, err := os.ReadFile(e.ConfigPath())
	if err != nil {
		t.Fatal(err)
	}
	full := string(b)
	lines := strings.Split(full, "\n")
	var one []string
	for _, l := range lines {
		if strings.Contains(l, "{node: pve2") || strings.Contains(l, "{node: pve3") {
			continue
		}
		one = append(one, l)
	}
	os.WriteFile(e.ConfigPath(), []byte(strings.Join(one, "\n")), 0o644)
	mustSucceed(t, e.apply(), "apply of one server")
	if r := e.viaVIP("get", "nodes", "-o", readyNodes); r.Stdout != "lab-mgmt=True,true " {
		t.Fatalf("one server through the VIP: %+v", r)
	}

	os.WriteFile(e.ConfigPath(), []byte(full), 0o644)
	var r labtest.Result
	var probes, down, notReady int
	e.probing(func() { r = e.apply("-o", "json") }, func(p labtest.Result) {
		probes++
		switch {
		case p.Code != 0:
			down++
		case p.Stdout != "TrueTrueTrueTrueTrue":
			notReady++
		}
	}, "get", allProviders, "-A", "-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{end}`)
	mustSucceed(t, r, "apply of three servers")
	t.Logf("during the growth: %d probes through the VIP, %d unanswered, %d with a provider not Ready", probes, down, notReady)
	if notReady > 0 {
		t.Errorf("a provider was not Ready during the growth (%d of %d probes)", notReady, probes)
	}
	for _, ev := range strings.Split(r.Stdout, "\n") {
		if strings.Contains(ev, `"host":"lab-mgmt",`) && strings.Contains(ev, `"outcome":"changed"`) {
			t.Errorf("the first server was changed: %s", ev)
		}
	}
	if r := e.viaVIP("get", "nodes", "-o", readyNodes); r.Stdout != "lab-mgmt=True,true lab-mgmt-2=True,true lab-mgmt-3=True,true " {
		t.Errorf("three servers: %+v", r)
	}
	if r := e.apply(); r.Code != 0 || !strings.Contains(recap(t, r), "changed=0 ") {
		t.Errorf("after the growth, a re-run changed something:\n%s", r.Stdout)
	}

	// The first server's VM lost and re-created: it joins the running
	// cluster at the VIP with the token of a server that runs it, rather
	// than found a second cluster; the cluster's data is still there, and
	// the next run keeps it joined.
	if r := e.viaVIP("create", "configmap", "before-recreate"); r.Code != 0 {
		t.Fatal(r)
	}
	if r := e.OnNode("pve1", "qm stop 110 && qm destroy 110 --purge"); r.Code != 0 {
		t.Fatal(r)
	}
	r = e.apply()
	mustSucceed(t, r, "apply with the first server's VM gone")
	kh := filepath.Join(e.LaptopHome(), ".config/mgmtctl/known_hosts")
	if r := e.SSH("ubuntu", "192.0.2.50", kh, "sudo cat /etc/rancher/k3s/config.yaml"); !strings.Contains(r.Stdout, "server: \"https://192.0.2.60:6443\"\ntoken-file: /etc/rancher/k3s/cluster-token\n") || strings.Contains(r.Stdout, "cluster-init") {
		t.Errorf("the re-created first server does not join: %+v", r)
	}
	if r := e.viaVIP("get", "nodes", "-o", readyNodes); r.Stdout != "lab-mgmt=True,true lab-mgmt-2=True,true lab-mgmt-3=True,true " {
		t.Errorf("after the first server rejoined: %+v", r)
	}
	if r := e.viaVIP("get", "configmap", "before-recreate", "-o", "name"); r.Stdout != "configmap/before-recreate\n" {
		t.Errorf("the cluster's data after the first server rejoined: %+v", r)
	}
	if r := e.apply(); r.Code != 0 || !strings.Contains(recap(t, r), "changed=0 ") {
		t.Errorf("after the first server rejoined, a re-run changed something:\n%s", r.Stdout)
	}

	// A Proxmox node's sshd stopped: the run stops at its preflight's look
	// at the nodes, naming the node, before anything changes anywhere;
	// with sshd back, there is nothing to do.
	if err := e.SetFault("stop-sshd", "pve2", true); err != nil {
		t.Fatal(err)
	}
	r = e.apply()
	if r.Code != 4 || !strings.Contains(r.Stdout+r.Stderr, "pve2 (192.0.2.11:22)") || !strings.Contains(r.Stdout+r.Stderr, "connection refused") ||
		!strings.Contains(r.Stderr, "preflight: nothing was changed") || strings.Contains(r.Stdout, "changed: ") {
		t.Errorf("apply with pve2's sshd stopped: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if err := e.SetFault("stop-sshd", "pve2", false); err != nil {
		t.Fatal(err)
	}
	if r := e.apply(); r.Code != 0 || !strings.Contains(recap(t, r), "changed=0 ") {
		t.Errorf("with pve2's sshd back:\n%s\n%s", r.Stdout, r.Stderr)
	}

	// destroy takes every server's VM, each from its node, and refuses
	// all of them when one is not mgmtctl's.
	if r := e.OnNode("pve3", "qm set 112 --tags production"); r.Code != 0 {
		t.Fatal(r)
	}
	r = e.mgmtctl("destroy", "--yes")
	if r.Code != 1 || !strings.Contains(r.Stdout+r.Stderr, `VM 112 on pve3 is not mgmtctl's`) || e.OnNode("pve1", "qm status 110").Code != 0 {
		t.Fatalf("destroy with a foreign VM: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	e.OnNode("pve3", "qm set 112 --tags mgmtctl")
	r = e.mgmtctl("destroy", "--yes")
	mustSucceed(t, r, "destroy")
	for i, n := range e.Nodes()[:3] {
		if want := fmt.Sprintf("destroy VM %d (%s) on %s with its disks", lab.VMID+i, []string{"lab-mgmt", "lab-mgmt-2", "lab-mgmt-3"}[i], n.Name); !strings.Contains(r.Stdout, want) {
			t.Errorf("destroy did not say %q:\n%s", want, r.Stdout)
		}
		if e.OnNode(n.Name, fmt.Sprintf("qm status %d", lab.VMID+i)).Code == 0 {
			t.Errorf("VM %d left on %s", lab.VMID+i, n.Name)
		}
	}
}

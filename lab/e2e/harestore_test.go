package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mgmtctl/mgmtctl/lab/internal/lab"
)

var stepLine = regexp.MustCompile(`(?m)^\w+: \[([^\]]+)\] ([a-z0-9]+)/([a-z0-9-]+)`)

// phaseSteps is each step of phase in a run's text output, as step@host,
// in the order they ran (gather-facts left out).
func phaseSteps(out, phase string) []string {
	var steps []string
	for _, m := range stepLine.FindAllStringSubmatch(out, -1) {
		if m[2] == phase && m[3] != "gather-facts" {
			steps = append(steps, m[3]+"@"+m[1])
		}
	}
	return steps
}

// staleServer is a server's Node the backup holds and the config does not
// have: a server since removed, whose Node the restore brings back.
const staleServer = `apiVersion: v1
kind: Node
metadata:
  name: lab-mgmt-old
  labels:
    node-role.kubernetes.io/etcd: "true"
`

// workloadMachines are a Cluster with two Machines, as CAPMOX's cluster
// template makes them (Cluster API v1beta2, CAPMOX v1alpha2, the real
// CRDs), each ProxmoxMachine naming the VM CAPMOX made for it.
const workloadMachines = `apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: lab1
  namespace: default
spec:
  clusterNetwork:
    serviceDomain: cluster.local
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata:
  name: lab1-cp-1
  namespace: default
spec:
  clusterName: lab1
  bootstrap:
    dataSecretName: lab1-cp-1
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: ProxmoxMachine
    name: lab1-cp-1
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata:
  name: lab1-w-1
  namespace: default
spec:
  clusterName: lab1
  bootstrap:
    dataSecretName: lab1-w-1
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: ProxmoxMachine
    name: lab1-w-1
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha2
kind: ProxmoxMachine
metadata:
  name: lab1-cp-1
  namespace: default
spec:
  sourceNode: pve1
  templateID: 9000
  virtualMachineID: 201
  network:
    networkDevices:
      - name: net0
        bridge: vmbr0
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha2
kind: ProxmoxMachine
metadata:
  name: lab1-w-1
  namespace: default
spec:
  sourceNode: pve1
  templateID: 9000
  virtualMachineID: 202
  network:
    networkDevices:
      - name: net0
        bridge: vmbr0
`

// capmoxVM makes VM id on node as CAPMOX's clone leaves it: named after
// its Machine, tagged with its address (CAPMOX's ip_net0_ tag).
func (e *env) capmoxVM(node string, id int, name, ip string) {
	e.t.Helper()
	if r := e.OnNode(node, fmt.Sprintf("qm create %d --name %s --cores 2 --memory 2048 --tags ip_net0_%s", id, name, ip)); r.Code != 0 {
		e.t.Fatalf("qm create %d on %s: %+v", id, node, r)
	}
}

// TestHARestore is disaster recovery for a cluster of three servers, onto
// VMs destroyed and re-created: three servers converged with a test
// object (a copy of haBackedUp), a removed server's Node, backup; destroy and apply three fresh servers (the object
// is gone); a restore killed half-way is completed by the next, which
// follows k3s's procedure (k3s stopped on the others,
// the first reset from the snapshot, the others' etcd data moved aside and
// each rejoined) and leaves three healthy members, the object back, the
// removed server's Node gone and the providers Ready; the next apply
// changes nothing. No output holds the cluster token.
func TestHARestore(t *testing.T) {
	t.Parallel()
	// Three servers converged with the test object (before-backup) made:
	// a copy of the template the other restores of three servers start
	// from, whose own backup this test leaves aside.
	e := haEnv(t, haBackedUp.Start(t))
	e.bin = raceChecked(t, e.bin)
	e.kubectlApply("stale-node", staleServer)
	// A workload cluster whose Machines' VMs CAPMOX made on two nodes.
	e.kubectlApply("machines", workloadMachines)
	for _, m := range []struct{ name, node string }{{"lab1-cp-1", "pve1"}, {"lab1-w-1", "pve2"}} {
		if r := e.viaVIP("patch", "proxmoxmachine", m.name, "--subresource=status", "--type=merge", "-p", `{"status":{"proxmoxNode":"`+m.node+`"}}`); r.Code != 0 {
			t.Fatalf("ProxmoxMachine %s's node: %+v", m.name, r)
		}
	}
	e.capmoxVM("pve1", 201, "lab1-cp-1", "192.0.2.101")
	e.capmoxVM("pve2", 202, "lab1-w-1", "192.0.2.102")

	r := e.mgmtctl("backup")
	mustSucceed(t, r, "backup")
	// The template's backup, then this one (directories named by time).
	dirs, _ := filepath.Glob(filepath.Join(e.LaptopHome(), ".local/share/mgmtctl/backups/lab-mgmt/*"))
	if len(dirs) != 2 {
		t.Fatalf("backups: %v", dirs)
	}
	dirs = dirs[1:]
	token, err := os.ReadFile(filepath.Join(dirs[0], "token"))
	if err != nil || !strings.HasPrefix(string(token), "K10") {
		t.Fatalf("token: %q %v", token, err)
	}
	secret := strings.TrimSpace(string(token))

	mustSucceed(t, e.mgmtctl("destroy", "--yes"), "destroy")
	mustSucceed(t, e.apply(), "apply three fresh servers")
	if out := e.viaVIP("get", "configmap", "before-backup", "--ignore-not-found", "-o", "name").Stdout; out != "" {
		t.Fatalf("the fresh cluster has the object: %q", out)
	}

	// Since the backup, a Machine's VM was deleted and CAPMOX made one
	// the snapshot has no Machine for.
	if r := e.OnNode("pve2", "qm destroy 202"); r.Code != 0 {
		t.Fatalf("qm destroy 202: %+v", r)
	}
	e.capmoxVM("pve3", 203, "lab1-w-2", "192.0.2.103")

	// A restore killed as the second server's etcd data is moved aside
	// (the first already reset): the next restore completes it.
	second := filepath.Join(e.VMDisk(lab.VMID+1), "upper/var/lib/rancher/k3s/server")
	e.killRunWhen([]string{"restore", "--from", dirs[0], "--yes"}, func() bool {
		moved, _ := filepath.Glob(filepath.Join(second, "db-before-restore-*"))
		return len(moved) > 0
	}, "the second server's rejoin")
	r = e.mgmtctl("restore", "--from", dirs[0], "--yes")
	mustSucceed(t, r, "restore after a restore killed")
	noSecret(t, r, secret)
	// k3s's procedure, in its order: the others stopped before the first
	// is reset, then each rejoins.
	if got, want := strings.Join(phaseSteps(r.Stdout, "restore"), " "),
		"stop-k3s@lab-mgmt-2 stop-k3s@lab-mgmt-3 restore@lab-mgmt hold-clusters@lab-mgmt release-hold@lab-mgmt api-vip@lab-mgmt rejoin@lab-mgmt-2 rejoin@lab-mgmt-3 etcd-members@lab-mgmt stale-nodes@lab-mgmt machine-drift@pve1"; got != want {
		t.Errorf("restore's steps:\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(r.Stdout, "3 etcd members healthy") || !strings.Contains(r.Stdout, "delete Node lab-mgmt-old") {
		t.Errorf("restore's output:\n%s", r.Stdout)
	}
	// The third server, held down by the killed restore, was still
	// masked: nothing could start it meanwhile.
	if !strings.Contains(r.Stdout, "ok: [lab-mgmt-3] restore/stop-k3s: k3s is stopped (inactive) and masked until it rejoins") {
		t.Errorf("lab-mgmt-3 was not held down since the killed restore:\n%s", r.Stdout)
	}
	// The drift between the snapshot's Machines and Proxmox now.
	for _, want := range []string{"Machine default/lab1-w-1: its VM 202 on pve2 is gone from Proxmox",
		"VM 203 (lab1-w-2) on pve3: made by CAPMOX (tag ip_net0_192.0.2.103), no Machine knows it"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("the drift report lacks %q:\n%s", want, r.Stdout)
		}
	}
	if strings.Contains(r.Stdout, "lab1-cp-1: its VM") {
		t.Errorf("a Machine whose VM is there reported:\n%s", r.Stdout)
	}
	if got := e.clusterPauses(); got != "lab1=true,"+filepath.Base(dirs[0]) {
		t.Errorf("the restored Cluster: %s", got)
	}
	e.heldBeforeManagers()
	if out := e.viaVIP("get", "configmap", "before-backup", "-o", "jsonpath={.data.k}").Stdout; out != "v" {
		t.Errorf("the object is not back: %q", out)
	}
	if r := e.viaVIP("get", "nodes", "-o", readyNodes); r.Stdout != "lab-mgmt=True,true lab-mgmt-2=True,true lab-mgmt-3=True,true " {
		t.Errorf("nodes after the restore: %+v", r)
	}
	if out := e.viaVIP("get", allProviders, "-A", "-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{end}`).Stdout; out != "TrueTrueTrueTrueTrue" {
		t.Errorf("providers Ready: %q", out)
	}
	// Each peer's old etcd data is kept aside, as k3s's message asks, and
	// its k3s is no longer masked.
	for _, ip := range []string{"192.0.2.51", "192.0.2.52"} {
		ls := e.SSH("ubuntu", ip, filepath.Join(e.LaptopHome(), ".config/mgmtctl/known_hosts"), "sudo ls /var/lib/rancher/k3s/server; systemctl is-enabled k3s")
		if !strings.Contains(ls.Stdout, "db-before-restore-") || !strings.HasSuffix(ls.Stdout, "\nenabled\n") {
			t.Errorf("%s's old etcd data, and k3s unmasked: %+v", ip, ls)
		}
	}
	// Told to, the restore resumes the Cluster it held.
	mustSucceed(t, e.mgmtctl("restore", "--resume"), "restore --resume")
	if got := e.clusterPauses(); got != "lab1=<none>," {
		t.Errorf("the Cluster after restore --resume: %s", got)
	}
	r = e.apply()
	if got := recap(t, r); !strings.Contains(got, "changed=0 ") {
		t.Errorf("apply after the restore: %s\n%s", got, r.Stdout)
	}
	noSecret(t, r, secret)
}

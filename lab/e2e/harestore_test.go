package e2e

import (
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

// TestHARestore is disaster recovery for a cluster of three servers, onto
// VMs destroyed and re-created: apply, a test object and a removed
// server's Node, backup; destroy and apply three fresh servers (the object
// is gone); a restore killed half-way is completed by the next, which
// follows k3s's procedure (k3s stopped on the others,
// the first reset from the snapshot, the others' etcd data moved aside and
// each rejoined) and leaves three healthy members, the object back, the
// removed server's Node gone and the providers Ready; the next apply
// changes nothing. No output holds the cluster token.
func TestHARestore(t *testing.T) {
	t.Parallel()
	e := startHA(t)
	mustSucceed(t, e.apply(), "apply")
	if r := e.viaVIP("create", "configmap", "before-backup", "--from-literal=k=v"); !strings.Contains(r.Stdout, "created") {
		t.Fatalf("test object: %+v", r)
	}
	e.kubectlApply("stale-node", staleServer)

	r := e.mgmtctl("backup")
	mustSucceed(t, r, "backup")
	dirs, _ := filepath.Glob(filepath.Join(e.LaptopHome(), ".local/share/mgmtctl/backups/lab-mgmt/*"))
	if len(dirs) != 1 {
		t.Fatalf("backups: %v", dirs)
	}
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
		"stop-k3s@lab-mgmt-2 stop-k3s@lab-mgmt-3 restore@lab-mgmt api-vip@lab-mgmt rejoin@lab-mgmt-2 rejoin@lab-mgmt-3 etcd-members@lab-mgmt stale-nodes@lab-mgmt hold-clusters@lab-mgmt"; got != want {
		t.Errorf("restore's steps:\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(r.Stdout, "3 etcd members healthy") || !strings.Contains(r.Stdout, "delete Node lab-mgmt-old") {
		t.Errorf("restore's output:\n%s", r.Stdout)
	}
	if out := e.viaVIP("get", "configmap", "before-backup", "-o", "jsonpath={.data.k}").Stdout; out != "v" {
		t.Errorf("the object is not back: %q", out)
	}
	if r := e.viaVIP("get", "nodes", "-o", readyNodes); r.Stdout != "lab-mgmt=True,true lab-mgmt-2=True,true lab-mgmt-3=True,true " {
		t.Errorf("nodes after the restore: %+v", r)
	}
	if out := e.viaVIP("get", allProviders, "-A", "-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{end}`).Stdout; out != "TrueTrueTrueTrueTrue" {
		t.Errorf("providers Ready: %q", out)
	}
	// Each peer's old etcd data is kept aside, as k3s's message asks.
	for _, ip := range []string{"192.0.2.51", "192.0.2.52"} {
		ls := e.SSH("ubuntu", ip, filepath.Join(e.LaptopHome(), ".config/mgmtctl/known_hosts"), "sudo ls /var/lib/rancher/k3s/server")
		if !strings.Contains(ls.Stdout, "db-before-restore-") {
			t.Errorf("%s's old etcd data: %+v", ip, ls)
		}
	}
	r = e.apply()
	if got := recap(t, r); !strings.Contains(got, "changed=0 ") {
		t.Errorf("apply after the restore: %s\n%s", got, r.Stdout)
	}
	noSecret(t, r, secret)
}

package e2e

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/lab/internal/lab"
	"github.com/mgmtctl/mgmtctl/lab/labtest"
)

// apiEnv turns the lab's config to spec.proxmox.access: api, with the
// token `mgmtctl proxmox role --for mgmtctl` names (lab.UseAPI), and stops
// every node's sshd: nothing of the run may reach a node over SSH.
func apiEnv(t *testing.T, e *env) string {
	t.Helper()
	if err := e.UseAPI(e.bin); err != nil {
		t.Fatal(err)
	}
	for _, n := range e.Nodes() {
		if err := e.SetFault("stop-sshd", n.Name, true); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(e.SecretsPath())
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`mgmtctlTokenSecret: (\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no mgmtctl token in %s", b)
	}
	return string(m[1])
}

// pvelockLease is mgmtctl's lease on its run lock in api access
// (pvelock.DefaultLease).
const pvelockLease = 60 * time.Second

// onNode runs a command line on a node's console (no SSH: the lab enters
// its namespaces).
func (e *env) onNode(node, command string) labtest.Result {
	e.t.Helper()
	return e.Run(node, "sh", "-c", command)
}

// TestAPIAccess is the vm phase through the Proxmox API with every sshd of
// the node stopped: a VM that never booted is reset through the API, the
// host key is cross-checked through agent/file-read, a converged run
// changes nothing, a stopped VM is started, each privilege the token lacks
// is named before anything changes, a foreign VM at the VMID is refused by
// apply and destroy, and destroy removes mgmtctl's VM. The token's secret
// is in no output, no laptop file but secrets.yaml, no process's
// arguments.
func TestAPIAccess(t *testing.T) {
	t.Parallel()
	e := start(t)
	secret := apiEnv(t, e)
	var outputs []string
	keep := func(r labtest.Result) labtest.Result {
		outputs = append(outputs, r.Stdout+r.Stderr)
		return r
	}

	// The plan shows the API calls, with their parameters.
	r := keep(e.apply("--check", "--tags", "vm", "--diff"))
	mustSucceed(t, r, "plan")
	for _, want := range []string{"Proxmox API: POST /nodes/pve/storage/local/download-url", "checksum-algorithm=sha256",
		"+scsi0=local-lvm:0,import-from=local:import/noble-server-cloudimg-amd64-", "+sshkeys=(the user's public key, URI-escaped)"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("plan --diff lacks %q:\n%s", want, r.Stdout)
		}
	}

	// A VM that never boots: created, grown and started through the API,
	// then waited for in vain; the next run resets it through the API.
	if err := e.SetFault("fail-boot", "", true); err != nil {
		t.Fatal(err)
	}
	r = keep(e.apply("--tags", "vm", "--wait-timeout", "15s"))
	if r.Code != 4 || !strings.Contains(r.Stdout, "changed: [pve] vm/create-vm") || !strings.Contains(r.Stdout, "failed: [lab-mgmt] vm/wait-ssh") {
		t.Fatalf("a VM that never boots: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if err := e.SetFault("fail-boot", "", false); err != nil {
		t.Fatal(err)
	}
	r = keep(e.apply("--tags", "vm,k3s"))
	mustSucceed(t, r, "apply once the cause is gone")
	for _, want := range []string{"changed: [lab-mgmt] vm/wait-ssh: reset VM 110", "ok: [pve] k3s/host-key-check: VM host key SHA256:"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("apply lacks %q:\n%s", want, r.Stdout)
		}
	}
	if c := e.onNode("pve", "qm config 110"); !strings.Contains(c.Stdout, "scsi0: local-lvm:vm-110-disk-0,size=30G\n") || !strings.Contains(c.Stdout, "tags: mgmtctl\n") ||
		!strings.Contains(c.Stdout, "sshkeys: ssh-ed25519%20") {
		t.Errorf("the VM qm sees:\n%s", c.Stdout)
	}
	r = keep(e.apply("--tags", "vm,k3s", "--detailed-exitcode"))
	mustSucceed(t, r, "converged apply")
	if got := recap(t, r); !strings.Contains(got, "changed=0 failed=0") {
		t.Errorf("converged apply: %s\n%s", got, r.Stdout)
	}

	// One run at a time on Proxmox: a run killed while it holds the run
	// lock (a pool generation under mgmtctl-lab-mgmt, its lease in the
	// comment) leaves it held until its lease runs out. Meanwhile the
	// next run is refused with exit 4, naming the holder and changing
	// nothing, and the read-only commands (plan, status, backup --list)
	// run; once the lease has run out
	// the next run takes the lock and converges.
	if !e.killAtStep(func(ev runEvent) bool { return ev.Phase == "vm" && ev.Event == "step" }, "apply", "--tags", "vm") {
		t.Fatal("the killed run never reached the vm phase's steps")
	}
	locked := e.pveState()
	r = keep(e.apply("--tags", "vm"))
	m := regexp.MustCompile(`locked by another mgmtctl run \((\S*@\S+ pid \d+), lock pool (mgmtctl-lab-mgmt/g\d+), lease until (\S+) unless renewed\)`).FindStringSubmatch(r.Stderr)
	if r.Code != 4 || m == nil || strings.Contains(r.Stdout, "changed: ") || !strings.Contains(r.Stderr, "next: wait for the other run to finish") {
		t.Fatalf("a run while another holds the lock: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if got, _ := os.ReadFile(e.UserCfgPath()); !strings.Contains(string(got), "\npool:"+m[2]+":mgmtctl run lock held by "+strings.ReplaceAll(m[1], ":", "%3A")+" until ") {
		t.Errorf("the lock's pool in user.cfg:\n%s", got)
	}
	for _, args := range [][]string{{"plan", "--tags", "vm"}, {"status", "--tags", "vm,k3s"}, {"backup", "--list"}} {
		mustSucceed(t, keep(e.mgmtctl(args...)), strings.Join(args, " ")+" while the lock is held")
	}
	if e.pveState() != locked {
		t.Errorf("a refused run changed the node")
	}
	until, err := time.Parse(time.RFC3339, m[3])
	if err != nil {
		t.Fatal(err)
	}
	if wait := time.Until(until); wait > pvelockLease {
		t.Fatalf("the lease runs until %s, more than a lease from now", until)
	} else {
		time.Sleep(wait + time.Second)
	}
	r = keep(e.apply("--tags", "vm"))
	mustSucceed(t, r, "apply once the killed run's lease ran out")
	if got := recap(t, r); !strings.Contains(got, "changed=0 failed=0") {
		t.Errorf("apply after the lease: %s\n%s", got, r.Stdout)
	}
	if got, _ := os.ReadFile(e.UserCfgPath()); len(regexp.MustCompile(`(?m)^pool:mgmtctl-lab-mgmt/g\d+:`).FindAll(got, -1)) != 1 {
		t.Errorf("lock generations left in user.cfg, want the newest alone:\n%s", got)
	}

	// A stopped VM is started through the API.
	mustSucceed(t, e.onNode("pve", "qm stop 110"), "qm stop")
	r = keep(e.apply("--tags", "vm"))
	mustSucceed(t, r, "apply after stop")
	if !strings.Contains(r.Stdout, "changed: [pve] vm/start-vm: start VM 110") || !strings.Contains(recap(t, r), "changed=1 ") {
		t.Errorf("a stopped VM:\n%s", r.Stdout)
	}

	// Without any one privilege mgmtctl needs, apply names it with its
	// path and the command that grants it, and changes nothing.
	cfg, err := os.ReadFile(e.UserCfgPath())
	if err != nil {
		t.Fatal(err)
	}
	roles := regexp.MustCompile(`(?m)^role:(Mgmtctl\.[A-Za-z]+):([^:]*):$`).FindAllStringSubmatch(string(cfg), -1)
	if len(roles) < 4 {
		t.Fatalf("mgmtctl's roles: %q", roles)
	}
	paths := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^acl:[01]:([^:]+):[^:]*:(Mgmtctl\.[A-Za-z]+):$`).FindAllStringSubmatch(string(cfg), -1) {
		paths[m[2]] = m[1]
	}
	before := e.pveState()
	for _, role := range roles {
		privs := strings.Split(role[2], ",")
		for i, p := range privs {
			rest := append(append([]string{}, privs[:i]...), privs[i+1:]...)
			fewer := strings.Replace(string(cfg), role[0], "role:"+role[1]+":"+strings.Join(rest, ",")+":", 1)
			if err := os.WriteFile(e.UserCfgPath(), []byte(fewer), 0o640); err != nil {
				t.Fatal(err)
			}
			r := keep(e.apply("--tags", "vm"))
			want := "on " + paths[role[1]] + ": " + p
			if r.Code != 1 || !strings.Contains(r.Stderr, "lacks privileges mgmtctl's vm phase needs") || !strings.Contains(r.Stderr, want) ||
				!strings.Contains(r.Stderr, "pveum role modify "+role[1]+" --append 1 --privs "+p) {
				t.Errorf("without %s on %s: exit %d\n%s", p, paths[role[1]], r.Code, r.Stderr)
			}
		}
	}
	if err := os.WriteFile(e.UserCfgPath(), cfg, 0o640); err != nil {
		t.Fatal(err)
	}
	if after := e.pveState(); after != before {
		t.Errorf("a run refused for a privilege changed the node")
	}

	// A VM at the VMID that is not mgmtctl's: apply and destroy refuse it,
	// and leave it as it was.
	mustSucceed(t, e.onNode("pve", "qm stop 110 && qm destroy 110 --purge && qm create 110 --name someone-else --memory 1024"), "a foreign VM")
	foreign := e.pveState()
	if r := keep(e.apply("--tags", "vm")); r.Code != 1 || !strings.Contains(r.Stderr, `VMID 110 belongs to another VM on pve (name "someone-else"`) {
		t.Errorf("apply over a foreign VM: exit %d\n%s", r.Code, r.Stderr)
	}
	if r := keep(e.mgmtctl("destroy", "--yes")); r.Code == 0 || !strings.Contains(r.Stderr, `VM 110 on pve is not mgmtctl's (name "someone-else"`) {
		t.Errorf("destroy of a foreign VM: exit %d\n%s", r.Code, r.Stderr)
	}
	if e.pveState() != foreign {
		t.Errorf("the foreign VM was touched")
	}
	mustSucceed(t, e.onNode("pve", "qm destroy 110"), "remove the foreign VM")
	mustSucceed(t, keep(e.apply("--tags", "vm")), "apply again")
	r = keep(e.mgmtctl("destroy", "--yes"))
	mustSucceed(t, r, "destroy")
	if !strings.Contains(r.Stdout, "Proxmox API: DELETE /nodes/pve/qemu/110") && !strings.Contains(r.Stdout, "destroy VM 110") {
		t.Errorf("destroy:\n%s", r.Stdout)
	}
	if c := e.onNode("pve", "qm list"); strings.Contains(c.Stdout, "110") {
		t.Errorf("VM 110 is still there:\n%s", c.Stdout)
	}

	// The token's secret: in no output, no laptop file but secrets.yaml
	// (the debug logs included), no process's arguments.
	e.secretNowhere(secret, "mgmtctl's token secret", outputs)
}

// TestAPIAccessHA: three servers on three nodes through one node's API
// (it proxies the others' paths), every sshd stopped; a converged run
// changes nothing; a VM stopped on another node is started; destroy
// removes all three.
func TestAPIAccessHA(t *testing.T) {
	t.Parallel()
	e := startHA(t)
	apiEnv(t, e)
	r := e.apply("--tags", "vm,k3s")
	mustSucceed(t, r, "first apply")
	for i, n := range e.Nodes()[:3] {
		id := lab.VMID + i
		if c := e.onNode(n.Name, "qm status "+strconv.Itoa(id)); c.Stdout != "status: running\n" {
			t.Errorf("VM %d on %s: %+v", id, n.Name, c)
		}
	}
	if strings.Count(r.Stdout, "confirmed by the guest agent") != 3 {
		t.Errorf("host keys through the agent:\n%s", r.Stdout)
	}
	r = e.apply("--tags", "vm,k3s")
	mustSucceed(t, r, "second apply")
	if got := recap(t, r); !strings.Contains(got, "changed=0 failed=0") {
		t.Errorf("second apply: %s\n%s", got, r.Stdout)
	}
	mustSucceed(t, e.onNode("pve2", "qm stop 111"), "qm stop on pve2")
	r = e.apply("--tags", "vm")
	mustSucceed(t, r, "apply after a stop on pve2")
	if !strings.Contains(r.Stdout, "changed: [pve2] vm/start-vm: start VM 111") || !strings.Contains(recap(t, r), "changed=1 ") {
		t.Errorf("a VM stopped on pve2:\n%s", r.Stdout)
	}
	mustSucceed(t, e.mgmtctl("destroy", "--yes"), "destroy")
	for _, n := range e.Nodes()[:3] {
		if c := e.onNode(n.Name, "qm list"); strings.TrimSpace(c.Stdout) != "" {
			t.Errorf("VMs left on %s:\n%s", n.Name, c.Stdout)
		}
	}
}

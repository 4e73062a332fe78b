package e2e

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/lab/internal/lab"
	"github.com/mgmtctl/mgmtctl/lab/labtest"
)

// vmSSH runs a command on the VM as its user, verified by the host key
// mgmtctl learned.
func (e *env) vmSSH(cmd string) labtest.Result {
	return e.SSH("ubuntu", lab.VMAddr, filepath.Join(e.LaptopHome(), ".config/mgmtctl/known_hosts"), cmd)
}

// kubectl runs the lab's kubectl on the laptop with k3s's admin kubeconfig
// pointed at the VM's address (what the kubeconfig phase will write).
func (e *env) kubectl(args ...string) labtest.Result {
	e.t.Helper()
	r := e.vmSSH("sudo cat /etc/rancher/k3s/k3s.yaml")
	if r.Code != 0 {
		e.t.Fatalf("read k3s.yaml: %+v", r)
	}
	kc := filepath.Join(e.LaptopHome(), "admin.kubeconfig")
	os.WriteFile(kc, []byte(strings.Replace(r.Stdout, "https://127.0.0.1:6443", "https://"+lab.VMAddr+":6443", 1)), 0o600)
	return e.Run("", append([]string{labtest.Kubectl(e.t), "--kubeconfig", kc}, args...)...)
}

func (e *env) k3sLog() string {
	b, _ := os.ReadFile(filepath.Join(e.VMDisk(lab.VMID), "upper/var/lib/labsim/units/k3s.service.log"))
	return string(b)
}

func lastJSON(t *testing.T, out string) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil {
		t.Fatalf("last line is not JSON: %q", lines[len(lines)-1])
	}
	return m
}

func TestK3sPhase(t *testing.T) {
	t.Parallel()
	e := start(t)
	vmRun := e.apply("--tags", "vm")
	mustSucceed(t, vmRun, "the vm phase")
	// A cluster k3s initialised without secrets-encryption (as mgmtctl
	// made them before it turned it on): config.yaml without it, the
	// pinned k3s installed by hand, a Secret written in clear.
	mustSucceed(t, e.vmSSH(`sudo mkdir -p /etc/rancher/k3s && printf '%s\n' 'cluster-init: true' 'disable:' '  - traefik' 'tls-san:' '  - "192.0.2.50"' 'write-kubeconfig-mode: "0600"' | sudo tee /etc/rancher/k3s/config.yaml >/dev/null &&
sudo sh -c 'curl -sSfL -o /tmp/install.sh https://get.k3s.io && INSTALL_K3S_VERSION=v1.35.7+k3s1 sh /tmp/install.sh'`), "k3s without secrets-encryption")
	if r := e.kubectl("create", "secret", "generic", "written-in-clear", "--from-literal=k="+configMapMarker); r.Code != 0 {
		t.Fatalf("a Secret: %+v", r)
	}
	// A plain apply turns it on, by k3s's own procedure: enable (the
	// identity provider), the restart with secrets-encryption,
	// rotate-keys (a key, every Secret written again).
	r := e.apply("--tags", "vm,k3s")
	mustSucceed(t, r, "first apply")
	if !strings.Contains(vmRun.Stdout+r.Stdout, "confirmed by the guest agent") {
		t.Errorf("host key not cross-checked:\n%s", r.Stdout)
	}
	order := []string{"changed: [lab-mgmt] k3s/secrets-encryption-enable: turn secrets-encryption on", "changed: [lab-mgmt] k3s/config: update /etc/rancher/k3s/config.yaml",
		"changed: [lab-mgmt] k3s/restart-k3s: restart k3s", "changed: [lab-mgmt] k3s/secrets-encryption-rotate-keys: encrypt every Secret", "ok: [lab-mgmt] k3s/restart-k3s-for-key"}
	for i := 1; i < len(order); i++ {
		if a, b := strings.Index(r.Stdout, order[i-1]), strings.Index(r.Stdout, order[i]); a < 0 || b < a {
			t.Errorf("secrets-encryption turned on: %q then %q:\n%s", order[i-1], order[i], r.Stdout)
		}
	}
	var enc struct {
		Stage     string `json:"stage"`
		Enable    *bool  `json:"enable"`
		HashMatch bool   `json:"hashmatch"`
		ActiveKey string `json:"activekey"`
	}
	if st := e.vmSSH("sudo k3s secrets-encrypt status -o json"); json.Unmarshal([]byte(st.Stdout), &enc) != nil || enc.Enable == nil || !*enc.Enable ||
		enc.Stage != "reencrypt_finished" || !enc.HashMatch || !strings.HasPrefix(enc.ActiveKey, "AES-CBC aescbckey-") {
		t.Errorf("k3s secrets-encrypt status: %+v", st)
	}
	if r := e.kubectl("get", "secret", "written-in-clear", "-o", "jsonpath={.data.k}"); r.Stdout != base64.StdEncoding.EncodeToString([]byte(configMapMarker)) {
		t.Errorf("the Secret written before: %+v", r)
	}
	r = e.apply("--tags", "vm,k3s", "-o", "json", "--detailed-exitcode")
	mustSucceed(t, r, "second apply")
	if m := lastJSON(t, r.Stdout); m["event"] != "recap" || m["changed"] != 0.0 || m["failed"] != 0.0 {
		t.Errorf("second run recap: %v", m)
	}
	if r := e.kubectl("get", "node", "lab-mgmt", "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status} {.status.nodeInfo.kubeletVersion}"); r.Stdout != "True v1.35.7+k3s1" {
		t.Errorf("node: %+v", r)
	}
	if r := e.vmSSH("sudo cat /etc/rancher/k3s/config.yaml; sudo stat -c %a /etc/rancher/k3s/k3s.yaml"); !strings.Contains(r.Stdout, "tls-san:\n  - \"192.0.2.50\"\n") || !strings.HasSuffix(r.Stdout, "600\n") {
		t.Errorf("config: %+v", r)
	}
	// Started by the installer, then restarted once, with
	// secrets-encryption: rotate-keys needs no restart of the server it
	// ran on.
	if n, m := strings.Count(e.k3sLog(), " start"), strings.Count(e.k3sLog(), " restart"); n != 2 || m != 1 {
		t.Errorf("k3s started %d times, restarted %d:\n%s", n, m, e.k3sLog())
	}

	// A new pin upgrades k3s, after a backup to the laptop (its snapshot
	// saved, then copied), and nothing else changes.
	e.editConfig("  kubeconfig:", "  k3s:\n    version: v1.36.3+k3s1\n  kubeconfig:")
	r = e.apply("--tags", "vm,k3s")
	mustSucceed(t, r, "upgrade")
	if !strings.Contains(r.Stdout, "changed: [lab-mgmt] k3s/install: upgrade k3s from v1.35.7+k3s1 to v1.36.3+k3s1") || !strings.Contains(recap(t, r), "changed=3 ") ||
		!strings.Contains(r.Stdout, "changed: [lab-mgmt] k3s/etcd-snapshot: save an etcd snapshot of lab-mgmt before upgrading k3s from v1.35.7+k3s1 to v1.36.3+k3s1") ||
		strings.Index(r.Stdout, "k3s/copy:") > strings.Index(r.Stdout, "k3s/install:") {
		t.Errorf("upgrade:\n%s", r.Stdout)
	}
	if r := e.kubectl("get", "node", "lab-mgmt", "-o", "jsonpath={.status.nodeInfo.kubeletVersion}"); r.Stdout != "v1.36.3+k3s1" {
		t.Errorf("after upgrade: %+v", r)
	}

	// config.yaml changed behind mgmtctl's back: rewritten, and k3s is
	// restarted exactly once.
	restarts := strings.Count(e.k3sLog(), " restart")
	mustSucceed(t, e.vmSSH("echo 'write-kubeconfig-mode: \"0644\"' | sudo tee /etc/rancher/k3s/config.yaml"), "drift")
	r = e.apply("--tags", "k3s", "--diff")
	mustSucceed(t, r, "apply after drift")
	if !strings.Contains(r.Stdout, "-write-kubeconfig-mode: \"0644\"") || !strings.Contains(r.Stdout, "changed: [lab-mgmt] k3s/restart-k3s: restart k3s to load /etc/rancher/k3s/config.yaml (changed ") || !strings.Contains(recap(t, r), "changed=2 ") {
		t.Errorf("drift:\n%s", r.Stdout)
	}
	if n := strings.Count(e.k3sLog(), " restart") - restarts; n != 1 {
		t.Errorf("k3s restarted %d times:\n%s", n, e.k3sLog())
	}
	if got := recap(t, e.apply("--tags", "vm,k3s")); !strings.Contains(got, "changed=0") {
		t.Errorf("after drift: %s", got)
	}

	// A run cut short after writing config.yaml and before restarting k3s
	// (as a kill would leave it: the file newer than the running k3s, its
	// content already right): the next run restarts k3s, once, from what
	// it observes; nothing remembered that it was due.
	restarts = strings.Count(e.k3sLog(), " restart")
	mustSucceed(t, e.vmSSH("sudo touch /etc/rancher/k3s/config.yaml"), "touch")
	r = e.apply("--tags", "k3s")
	mustSucceed(t, r, "apply after an interrupted restart")
	if !strings.Contains(r.Stdout, "changed: [lab-mgmt] k3s/restart-k3s: restart k3s") || !strings.Contains(r.Stdout, "ok: [lab-mgmt] k3s/config:") || !strings.Contains(recap(t, r), "changed=1 ") {
		t.Errorf("interrupted restart:\n%s", r.Stdout)
	}
	if n := strings.Count(e.k3sLog(), " restart") - restarts; n != 1 {
		t.Errorf("k3s restarted %d times:\n%s", n, e.k3sLog())
	}
	if got := recap(t, e.apply("--tags", "k3s")); !strings.Contains(got, "changed=0") {
		t.Errorf("after the interrupted restart: %s", got)
	}

	// Scheduled snapshots: spec.backup becomes k3s's own settings; k3s,
	// restarted with them, takes one within the schedule's interval (a
	// descriptor of robfig/cron's standard parser, as k3s reads it: the
	// test waits seconds, not a minute), and status reports the newest.
	e.editConfig("  kubeconfig:", "  backup:\n    schedule: \"@every 10s\"\n    retention: 2\n  kubeconfig:")
	r = e.apply("--tags", "vm,k3s")
	if !strings.Contains(r.Stdout, "changed: [lab-mgmt] k3s/restart-k3s: restart k3s") || !strings.Contains(recap(t, r), "changed=2 ") {
		t.Errorf("the snapshot schedule:\n%s", r.Stdout)
	}
	if r := e.vmSSH("sudo cat /etc/rancher/k3s/config.yaml"); !strings.Contains(r.Stdout, "etcd-snapshot-schedule-cron: \"@every 10s\"\netcd-snapshot-retention: 2\n") {
		t.Errorf("config.yaml: %+v", r)
	}
	snapshots := filepath.Join(e.VMDisk(lab.VMID), "upper/var/lib/rancher/k3s/server/db/snapshots/etcd-snapshot-lab-mgmt-*")
	deadline := time.Now().Add(90 * time.Second)
	for {
		// The test observes the VM's disk from outside: nothing to watch.
		if found, _ := filepath.Glob(snapshots); len(found) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scheduled snapshot within 90 s:\n%s", e.k3sLog())
		}
		time.Sleep(time.Second)
	}
	if _, code, out := e.status("--tags", "vm,k3s"); code != 0 || !strings.Contains(out, "scheduled snapshot(s), the newest etcd-snapshot-lab-mgmt-") {
		t.Errorf("status with scheduled snapshots: exit %d\n%s", code, out)
	}
}

// TestK3sInTurn: three checks of the k3s phase in one lab, one after
// another (each used a fresh lab of its own, whose start and k3s install
// cost more than the check: docs/testing.md):
//   - a run killed while k3s's installer runs converges on the next run;
//     the one after changes nothing;
//   - the suite's check for skipped config.yaml keys (run after every
//     test) catches a typo: one is planted in the VM's config.yaml by
//     hand, as a bad line mgmtctl wrote would be; k3s, on its restart,
//     logs its warning and the check names it; mgmtctl then puts its own
//     config.yaml back;
//   - the admin kubeconfig works with a real kubectl from the laptop; the
//     inspector reads but cannot touch; re-runs neither rewrite the files
//     nor mint a token; no credential is printed.
func TestK3sInTurn(t *testing.T) {
	t.Parallel()
	e := start(t)

	// Killed during the k3s install.
	mustSucceed(t, e.apply("--tags", "vm"), "vm")
	e.killWhen("k3s", filepath.Join(e.VMDisk(lab.VMID), "upper/usr/local/bin/k3s"), "the k3s install")
	mustSucceed(t, e.apply("--tags", "vm,k3s"), "apply after kill")
	if got := recap(t, e.apply("--tags", "vm,k3s")); !strings.Contains(got, "changed=0") {
		t.Errorf("third run: %s", got)
	}
	if r := e.kubectl("get", "node", "lab-mgmt", "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"); r.Stdout != "True" {
		t.Errorf("node: %+v", r)
	}

	// The typo guard.
	if got := e.skippedConfigKeys(); len(got) != 0 {
		t.Fatalf("skipped keys before the plant: %q", got)
	}
	e.planted = append(e.planted, "tls-sans")
	if r := e.vmSSH("echo 'tls-sans: [192.0.2.99]' | sudo tee -a /etc/rancher/k3s/config.yaml >/dev/null && sudo systemctl restart k3s"); r.Code != 0 {
		t.Fatal(r)
	}
	planted := *e
	planted.planted = nil // the check as every test runs it
	got := planted.skippedConfigKeys()
	if len(got) != 1 || !strings.Contains(got[0], `level=warning msg="Unknown flag --tls-sans found in config.yaml, skipping"`) {
		t.Errorf("the check found %q, want k3s's warning for the planted key", got)
	}
	r := e.apply("--tags", "k3s")
	mustSucceed(t, r, "apply over the planted key")
	if !strings.Contains(r.Stdout, "changed: [lab-mgmt] k3s/config") {
		t.Errorf("config.yaml not put back:\n%s", r.Stdout)
	}

	// The kubeconfig and the inspector.
	tags := "vm,k3s,kubeconfig,inspector"
	r = e.apply("--tags", tags, "--diff")
	mustSucceed(t, r, "apply")
	admin := filepath.Join(e.LaptopHome(), ".kube/lab-mgmt.kubeconfig")
	ro := filepath.Join(e.LaptopHome(), ".kube/lab-mgmt-ro.kubeconfig")
	for _, p := range []string{admin, ro} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", p, fi, err)
		}
	}
	kubectl := func(kc string, args ...string) labtest.Result {
		return e.Run("", append([]string{labtest.Kubectl(t), "--kubeconfig", kc}, args...)...)
	}
	if r := kubectl(admin, "config", "current-context"); r.Stdout != "lab-mgmt\n" {
		t.Errorf("context: %+v", r)
	}
	if r := kubectl(admin, "get", "nodes", "-o", "name"); r.Stdout != "node/lab-mgmt\n" {
		t.Errorf("admin kubectl (TLS to the VM's IP): %+v", r)
	}
	for _, c := range []struct{ verb, res, want string }{
		{"list", "pods", "yes"}, {"get", "secrets", "no"}, {"create", "deployments", "no"},
		{"create", "pods/exec", "no"}, {"create", "serviceaccounts/token", "no"}, {"list", "nodes", "yes"},
	} {
		if r := kubectl(ro, "auth", "can-i", c.verb, c.res, "-A"); strings.TrimSpace(r.Stdout) != c.want {
			t.Errorf("inspector can-i %s %s = %q, want %s", c.verb, c.res, r.Stdout, c.want)
		}
	}
	// No credential in the output, --diff included.
	for _, p := range []string{admin, ro} {
		b, _ := os.ReadFile(p)
		for _, line := range strings.Split(string(b), "\n") {
			for _, k := range []string{"client-key-data: ", "token: "} {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), k); ok && strings.Contains(r.Stdout+r.Stderr, v) {
					t.Errorf("%s printed", k)
				}
			}
		}
	}
	// Merge into a ~/.kube/config that does not exist yet: with no
	// current context there, the merged one becomes current, so a plain
	// kubectl works. Into one that has a current context: no switch.
	r = e.mgmtctl("kubeconfig", "--merge")
	if r.Code != 0 || !strings.Contains(r.Stdout, "made it the current context") {
		t.Fatalf("merge: %+v", r)
	}
	if r := e.Run("", labtest.Kubectl(t), "get", "nodes", "-o", "name"); r.Stdout != "node/lab-mgmt\n" {
		t.Errorf("plain kubectl after merging into an empty ~/.kube/config: %+v", r)
	}
	home := filepath.Join(e.LaptopHome(), ".kube/config")
	if r := kubectl(home, "config", "set-context", "elsewhere"); r.Code != 0 {
		t.Fatal(r)
	}
	if r := kubectl(home, "config", "use-context", "elsewhere"); r.Code != 0 {
		t.Fatal(r)
	}
	if r := e.mgmtctl("kubeconfig", "--merge"); r.Code != 0 || !strings.Contains(r.Stdout, "current context unchanged") {
		t.Fatalf("second merge: %+v", r)
	}
	if r := kubectl(home, "config", "current-context"); r.Stdout != "elsewhere\n" {
		t.Errorf("merge switched an existing current context: %+v", r)
	}
	// The cluster client of a check run or of status: every write is a
	// server-side dry run. The tool's own test drives it against this
	// lab's API server (it needs client-go, which this module keeps apart).
	e.goTestOfTheTool("./internal/kube", "TestDryRunWritesNothing", "MGMTCTL_LAB_KUBECONFIG="+admin)

	before, _ := os.ReadFile(ro)
	r = e.apply("--tags", tags)
	mustSucceed(t, r, "second apply")
	if got := recap(t, r); !strings.Contains(got, "changed=0") {
		t.Errorf("second run: %s", got)
	}
	if after, _ := os.ReadFile(ro); string(after) != string(before) {
		t.Error("the inspector token was re-minted while still fresh")
	}
}

// Package e2e runs the real mgmtctl binary, inside the lab's laptop
// namespace, against the simulated Proxmox node and VMs.
package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/lab/labtest"
)

type env struct {
	*labtest.Lab
	t   testing.TB
	bin string
	// planted are config.yaml keys a test put there on purpose: the
	// suite's check for skipped keys leaves them to that test.
	planted []string
}

func start(t *testing.T) *env {
	labtest.Skip(t)
	return newEnv(t, labtest.Start(t))
}

// newEnv is the env of lab l, which t started, with the suite's checks
// of its servers' k3s logs once t ends.
func newEnv(t testing.TB, l *labtest.Lab) *env {
	e := &env{Lab: l, t: t, bin: labtest.Mgmtctl(t)}
	t.Cleanup(e.noSkippedConfigKeys)
	t.Cleanup(e.k3sLogTails)
	return e
}

// TestMain removes the templates the tests started from once they are
// done.
func TestMain(m *testing.M) {
	labtest.Costs = costs
	code := m.Run()
	labtest.RemoveAll()
	os.Exit(code)
}

// converged is a lab whose one server a whole apply converged: the tests
// whose point is what comes after (status, plan, backup and restore,
// destroy) start from a copy of it, restarted as after a power cut,
// rather than each converging its own from nothing. The tests whose
// point is the way there (the full run, the verification list, kill and
// drop points) still start from nothing.
var converged = &labtest.Template{Name: "converged", Nodes: 1, Build: func(t testing.TB, l *labtest.Lab) {
	e := &env{Lab: l, t: t, bin: labtest.Mgmtctl(t)}
	mustSucceed(t, e.apply(), "apply")
}}

// startConverged is start on a copy of the converged lab. Its VM was
// powered off and started again: a first run finds the cluster as it was
// and changes nothing.
func startConverged(t *testing.T) *env {
	labtest.Skip(t)
	e := newEnv(t, converged.Start(t))
	r := e.apply()
	mustSucceed(t, r, "apply after the restart")
	if got := recap(t, r); !strings.Contains(got, "changed=0") {
		t.Fatalf("apply on the restarted converged lab: %s\n%s", got, r.Stdout)
	}
	// The kubelet starts every pod again after the reboot (the one that
	// ran ended as containerd reports a lost task); the test starts once
	// they all run again and are ready, as a cluster settled after it.
	running := []string{"pods", "--all", "-A", "--field-selector=status.phase=Running", "--timeout=3m"}
	for _, cond := range []string{"jsonpath={.status.containerStatuses[0].lastState.terminated.reason}=Unknown", "condition=Ready"} {
		if r := e.adminKubectl(append([]string{"wait", "--for=" + cond}, running...)...); r.Code != 0 {
			t.Fatalf("pods after the restart, waiting for %s: %+v", cond, r)
		}
	}
	return e
}

// k3sLogTails logs the end of every server's k3s log when the test
// failed: what a failed start says is there, and the lab is removed
// after the test (unless LABSIM_KEEP).
func (e *env) k3sLogTails() {
	if !e.t.Failed() {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(e.Dir, "vms", "*", "upper/var/log/k3s.log"))
	for _, p := range logs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		e.t.Logf("the end of %s:\n%s", p, strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}

// noSkippedConfigKeys fails the test if any server's k3s skipped a
// config.yaml key it has no flag for: a typo in what mgmtctl writes
// would otherwise go unnoticed, as k3s only warns.
func (e *env) noSkippedConfigKeys() {
	for _, l := range e.skippedConfigKeys() {
		e.t.Errorf("%s", l)
	}
}

// skippedConfigKeys are the lines of every server's k3s log that say a
// config.yaml key was skipped (k3s's own warning), but for planted keys.
func (e *env) skippedConfigKeys() []string {
	var found []string
	logs, _ := filepath.Glob(filepath.Join(e.Dir, "vms", "*", "upper/var/log/k3s.log"))
	for _, p := range logs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
	lines:
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.Contains(l, "found in config.yaml, skipping") {
				continue
			}
			for _, k := range e.planted {
				if strings.Contains(l, "Unknown flag --"+k+" ") {
					continue lines
				}
			}
			found = append(found, p+": "+l)
		}
	}
	return found
}

// startBench is start for a benchmark.
func startBench(b *testing.B) *env {
	labtest.Skip(b)
	bin := labtest.Mgmtctl(b)
	return &env{Lab: labtest.Start(b), t: b, bin: bin}
}

// mgmtctl runs the tool in the laptop namespace.
func (e *env) mgmtctl(args ...string) labtest.Result {
	e.t.Helper()
	start := time.Now()
	r := e.Run("", append([]string{e.bin}, append(args, "-c", e.ConfigPath())...)...)
	// Where a test's time goes, in go test -json's record of it: the
	// runs that take a while, each with its time (docs/testing.md).
	if d := time.Since(start); d >= 5*time.Second {
		e.t.Logf("mgmtctl %s: exit %d after %s", strings.Join(args, " "), r.Code, d.Round(100*time.Millisecond))
	}
	return r
}

func (e *env) apply(args ...string) labtest.Result {
	e.t.Helper()
	return e.mgmtctl(append([]string{"apply"}, args...)...)
}

// editConfig rewrites mgmt.yaml with one replacement.
func (e *env) editConfig(from, to string) {
	e.t.Helper()
	b, err := os.ReadFile(e.ConfigPath())
	if err != nil {
		e.t.Fatal(err)
	}
	if !strings.Contains(string(b), from) {
		e.t.Fatalf("mgmt.yaml has no %q", from)
	}
	if err := os.WriteFile(e.ConfigPath(), []byte(strings.Replace(string(b), from, to, 1)), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// lockPools are the run lock's generations in user.cfg (pveState).
var lockPools = regexp.MustCompile(`(?m)^pool:mgmtctl-lab-mgmt/g\d+:.*\n`)

// pveState hashes the Proxmox node's VM configs, volumes and image
// directory, as they sit on its disk, to compare before and after. The
// run lock of api access (the pools under mgmtctl-lab-mgmt in user.cfg, and
// user.cfg's lock file) is left out: any run that may change something
// takes it, and it is the run's own bookkeeping, not a change to the
// node.
func (e *env) pveState() string {
	e.t.Helper()
	root := filepath.Join(e.HostDisk("pve"), "upper")
	var lines []string
	// /etc/pve is the cluster's shared filesystem, kept beside the hosts.
	dirs := map[string]string{"etc/pve": e.Pmxcfs()}
	for _, sub := range []string{"var/lib/vz", "var/lib/labsim/storage", "root"} {
		dirs[sub] = filepath.Join(root, sub)
	}
	for sub, dir := range dirs {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			rel, _ := filepath.Rel(dir, p)
			if sub == "etc/pve" && rel == "user.cfg.lock" {
				return nil
			}
			b, _ := os.ReadFile(p)
			if sub == "etc/pve" && rel == "user.cfg" {
				b = lockPools.ReplaceAll(b, nil)
			}
			s := sha256.Sum256(b)
			lines = append(lines, filepath.Join(sub, rel)+" "+hex.EncodeToString(s[:8]))
			return nil
		})
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func recap(t testing.TB, r labtest.Result) string {
	t.Helper()
	for _, l := range strings.Split(r.Stdout, "\n") {
		if strings.HasPrefix(l, "total: ") {
			return l
		}
	}
	t.Fatalf("no recap in output:\n%s\n%s", r.Stdout, r.Stderr)
	return ""
}

func mustSucceed(t testing.TB, r labtest.Result, what string) {
	t.Helper()
	if r.Code != 0 {
		t.Fatalf("%s: exit %d\n%s\n%s", what, r.Code, r.Stdout, r.Stderr)
	}
}

// killWhen starts `mgmtctl apply --tags tags` in the laptop namespace and
// SIGKILLs it (with its children) as soon as path exists: a run cut short
// at a known point.
func (e *env) killWhen(tags, path, what string) {
	e.t.Helper()
	e.killRunWhen([]string{"apply", "--tags", tags}, func() bool {
		_, err := os.Stat(path)
		return err == nil
	}, what)
}

// killRunWhen starts `mgmtctl args... -c CONFIG` in the laptop namespace
// and SIGKILLs it (with its children) as soon as reached says so.
func (e *env) killRunWhen(args []string, reached func() bool, what string) {
	e.t.Helper()
	full, err := e.ExecArgv("", append(append([]string{e.bin}, args...), "-c", e.ConfigPath()))
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(full[0], full[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	// Generous: a run may wait out helm-controller's back-off first.
	deadline := time.Now().Add(4 * time.Minute)
	for !reached() {
		if time.Now().After(deadline) {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			cmd.Wait()
			e.t.Fatal(what + " never happened")
		}
		// The test observes the lab's disk from outside: nothing to watch.
		<-time.After(5 * time.Millisecond)
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
}

// sshLogins counts the logins the host's sshd has accepted so far, from
// its own log.
func (e *env) sshLogins(host string) int {
	e.t.Helper()
	b, err := os.ReadFile(e.HostLog(host))
	if err != nil {
		e.t.Fatal(err)
	}
	return strings.Count(string(b), "Accepted publickey for ")
}

// goTestOfTheTool runs one test of the tool's module in the laptop
// namespace, with env, and fails unless it ran and passed: a test of the
// tool that needs the lab's live servers skips itself anywhere else.
func (e *env) goTestOfTheTool(pkg, test string, env ...string) {
	e.t.Helper()
	out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE").Output()
	if err != nil {
		e.t.Fatal(err)
	}
	caches := strings.Fields(string(out))
	root, err := filepath.Abs("../..")
	if err != nil {
		e.t.Fatal(err)
	}
	// The laptop's HOME is the lab's: keep the machine's Go caches, and
	// fetch nothing (every module is already there).
	argv := append([]string{"env", "GOCACHE=" + caches[0], "GOMODCACHE=" + caches[1], "GOPROXY=off", "GOTOOLCHAIN=local"}, env...)
	argv = append(argv, "go", "-C", root, "test", "-count=1", "-v", "-run", "^"+test+"$", pkg)
	r := e.Run("", argv...)
	if r.Code != 0 || !strings.Contains(r.Stdout, "--- PASS: "+test+" ") {
		e.t.Errorf("%s %s in the lab: exit %d\n%s\n%s", pkg, test, r.Code, r.Stdout, r.Stderr)
	}
}

// secretNowhere fails the test if secret (what, in the message) is in
// any of outputs, in a laptop file but secrets.yaml (the debug logs
// included), or in any process's arguments.
func (e *env) secretNowhere(secret, what string, outputs []string) {
	e.t.Helper()
	for _, o := range outputs {
		if strings.Contains(o, secret) {
			e.t.Fatalf("an output holds %s:\n%s", what, o)
		}
	}
	filepath.WalkDir(e.LaptopHome(), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if b, _ := os.ReadFile(p); strings.Contains(string(b), secret) {
			e.t.Errorf("%s holds %s", p, what)
		}
		return nil
	})
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, _ := os.ReadFile(p); strings.Contains(string(b), secret) {
			e.t.Errorf("a process's arguments hold %s: %s: %q", what, p, b)
		}
	}
}

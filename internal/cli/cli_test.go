package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/mgmtctl/mgmtctl/internal/preflight"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/remote/sshtest"
	"github.com/mgmtctl/mgmtctl/internal/session"
	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

const testKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBNqX0ocPvUhqnXmSiE1X44IwvtNlnZ+0Zt4F3iHFNQR user@laptop\n"

const secret = "5e9a1f7c-0000-4000-8000-123456789abc"

type env struct {
	t    *testing.T
	home string
	dir  string
	out  bytes.Buffer
	err  bytes.Buffer
	vars map[string]string
	// phases, when set, replaces the real phases.
	phases func(*session.Session) []step.Phase
	// destroy, when set, replaces the destroy phase.
	destroy func(*session.Session) step.Phase
	// exec carries out the plans of the fake phases.
	exec step.Executor
	// in is the standard input; stdin, when set, replaces it.
	in    string
	stdin io.Reader
}

func newEnv(t *testing.T) *env {
	e := &env{t: t, home: t.TempDir(), dir: t.TempDir(), vars: map[string]string{"USER": "tester"}}
	os.MkdirAll(filepath.Join(e.home, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(e.home, ".ssh", "id_ed25519.pub"), []byte(testKey), 0o644)
	return e
}

func (e *env) path(name string) string { return filepath.Join(e.dir, name) }

func (e *env) run(args ...string) int {
	e.out.Reset()
	e.err.Reset()
	return Execute(context.Background(), args, e.opts())
}

func (e *env) opts() Options {
	var in io.Reader = strings.NewReader(e.in)
	if e.stdin != nil {
		in = e.stdin
	}
	o := Options{Out: &e.out, Err: &e.err, Getenv: func(k string) string { return e.vars[k] },
		Home: e.home, CacheDir: filepath.Join(e.home, ".cache"), Hostname: "laptop", Pid: 42,
		Version: "test", Phases: e.phases, Destroy: e.destroy, In: in}
	if e.phases != nil {
		// Fake phases fetch nothing and have no prerequisites to check.
		o.Preflight = func(*session.Session, []step.Phase, *preflight.Released) []preflight.Check { return nil }
	}
	if e.exec != nil {
		o.Exec = func(*session.Session) step.Executor { return e.exec }
	}
	return o
}

// writeConfig writes a valid config whose Proxmox host is addr.
func (e *env) writeConfig(addr string, edit func(string) string) string {
	body := fmt.Sprintf(`apiVersion: mgmtctl/v1alpha1
kind: ManagementCluster
metadata:
  name: lab-mgmt
spec:
  proxmox:
    host: %s
    node: pve
    apiURL: https://192.0.2.10:8006
    tokenID: capmox@pve!capi
  vm:
    id: 110
    address: 192.0.2.50/24
    gateway: 192.0.2.1
`, addr)
	if edit != nil {
		body = edit(body)
	}
	p := e.path("mgmt.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func TestInitThenValidate(t *testing.T) {
	e := newEnv(t)
	cfg := e.path("mgmt.yaml")
	if code := e.run("init", "-c", cfg); code != 0 {
		t.Fatalf("init exit %d: %s", code, e.err.String())
	}
	if !strings.Contains(e.out.String(), "wrote "+cfg) || strings.Contains(e.out.String(), "note:") {
		t.Errorf("init output:\n%s", e.out.String())
	}
	if code := e.run("validate", "-c", cfg); code != 0 {
		t.Fatalf("validate exit %d on init's output:\n%s", code, e.err.String())
	}
	if !strings.Contains(e.out.String(), cfg+": valid") {
		t.Errorf("validate output:\n%s", e.out.String())
	}
	// JSON as encoding/json writes it, whatever the path holds.
	odd := e.path("mgmt\x01é.yaml")
	if err := os.Rename(cfg, odd); err != nil {
		t.Fatal(err)
	}
	e.out.Reset()
	if code := e.run("validate", "-c", odd, "-o", "json"); code != 0 {
		t.Fatalf("validate -o json exit %d:\n%s", code, e.err.String())
	}
	var v struct {
		Valid  bool   `json:"valid"`
		Config string `json:"config"`
	}
	if err := json.Unmarshal(e.out.Bytes(), &v); err != nil || !v.Valid || v.Config != odd {
		t.Errorf("validate -o json: %q: %+v %v", e.out.String(), v, err)
	}
	if err := os.Rename(odd, cfg); err != nil {
		t.Fatal(err)
	}
	if code := e.run("init", "-c", cfg); code != 0 || !strings.Contains(e.out.String(), "kept "+cfg) {
		t.Errorf("second init: exit %d\n%s", code, e.out.String())
	}
}

// listener counts connections, to prove validate opens none.
func listener(t *testing.T) (string, *atomic.Int32) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return l.Addr().String(), &n
}

func TestBadConfigExits2AndConnectsNowhere(t *testing.T) {
	tests := []struct {
		name, from, to, want string
	}{
		{"vlan", "    id: 110\n", "    id: 110\n    vlan: 5000\n", ":13: spec.vm.vlan: must be from 1 to 4094"},
		{"vmid", "id: 110", "id: 7", ":12: spec.vm.id: must be from 100 to 999999999"},
		{"typo", "    node: pve", "    nodes: pve", ":8: spec.proxmox.nodes: unknown field"},
		{"gateway", "gateway: 192.0.2.1", "gateway: 10.9.9.9", ":14: spec.vm.gateway: must be inside the VM's subnet"},
		{"token", "tokenID: capmox@pve!capi", "tokenID: capmox", ":10: spec.proxmox.tokenID: must be a Proxmox API token ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, conns := listener(t)
			e := newEnv(t)
			cfg := e.writeConfig(addr, func(s string) string { return strings.Replace(s, tt.from, tt.to, 1) })
			for _, args := range [][]string{{"validate"}, {"apply"}, {"plan"}, {"apply", "--check"}} {
				code := e.run(append(args, "-c", cfg)...)
				if code != ExitUsage {
					t.Errorf("%v: exit %d, want 2", args, code)
				}
				if !strings.Contains(e.err.String(), cfg+tt.want) {
					t.Errorf("%v: stderr lacks %q:\n%s", args, cfg+tt.want, e.err.String())
				}
			}
			if n := conns.Load(); n != 0 {
				t.Errorf("%d connections opened for a bad config", n)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	e := newEnv(t)
	cfg := e.writeConfig("192.0.2.10", nil)
	w := steptest.NewWorld()
	e.phases, e.exec = fakePhases(w), w
	for _, args := range [][]string{
		{"bogus"},
		{"apply", "--bogus"},
		{"apply", "extra-arg", "-c", cfg},
		{"apply", "--tags", "vms", "-c", cfg},
		{"apply", "-o", "yaml", "-c", cfg},
		{"validate", "-c", e.path("missing.yaml")},
	} {
		if code := e.run(args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want 2; stderr:\n%s", args, code, e.err.String())
		}
	}
}

func fakePhases(w *steptest.World) func(*session.Session) []step.Phase {
	return func(*session.Session) []step.Phase {
		return []step.Phase{
			{Tag: step.TagVM, Steps: []step.Step{
				&steptest.File{StepID: "vm", HostName: "pve", Path: "/vm", Content: "110", W: w},
			}},
			{Tag: step.TagK3s, Steps: []step.Step{
				&steptest.File{StepID: "config", HostName: "lab-mgmt", Path: "/etc/rancher/k3s/config.yaml", Content: "tls-san: [192.0.2.50]\n", W: w},
			}},
			{Tag: step.TagCAPI, Steps: []step.Step{
				&steptest.File{StepID: "credentials", HostName: "lab-mgmt", Path: "/creds", Content: "PROXMOX_SECRET=" + secret, W: w},
			}},
		}
	}
}

func TestApplyCheckDiffDetailedExitCodes(t *testing.T) {
	e := newEnv(t)
	w := steptest.NewWorld()
	e.phases, e.exec = fakePhases(w), w
	e.vars["MGMTCTL_PROXMOX_TOKEN_SECRET"] = secret
	cfg := e.writeConfig("192.0.2.10", nil)

	// plan = apply --check --diff: nothing changes, diffs shown, secret hidden.
	if code := e.run("plan", "-c", cfg, "--detailed-exitcode"); code != ExitChanges {
		t.Fatalf("plan exit %d, want 3:\n%s%s", code, e.out.String(), e.err.String())
	}
	if len(w.Mutations()) != 0 {
		t.Fatalf("plan mutated: %v", w.Mutations())
	}
	out := e.out.String()
	for _, want := range []string{"check mode: nothing will be changed", "changed (check): [lab-mgmt] k3s/config", "+tls-san: [192.0.2.50]", "+PROXMOX_SECRET=[REDACTED]", "total: ok=0 changed=3"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out+e.err.String(), secret) {
		t.Fatalf("secret printed")
	}
	// Without --detailed-exitcode pending changes are success.
	if code := e.run("apply", "--check", "-c", cfg); code != 0 {
		t.Errorf("apply --check exit %d", code)
	}

	// apply converges; the second run says changed=0 and exits 0 even with
	// --detailed-exitcode.
	if code := e.run("apply", "-c", cfg, "--detailed-exitcode"); code != ExitChanges {
		t.Fatalf("apply exit %d:\n%s", code, e.err.String())
	}
	if code := e.run("apply", "-c", cfg, "--detailed-exitcode"); code != 0 {
		t.Fatalf("second apply exit %d:\n%s", code, e.out.String())
	}
	if !strings.Contains(e.out.String(), "total: ok=3 changed=0 failed=0 skipped=0 (nothing changed)") {
		t.Errorf("second run:\n%s", e.out.String())
	}

	// -o json: one object per line, recap last.
	if code := e.run("apply", "-c", cfg, "-o", "json"); code != 0 {
		t.Fatalf("json apply exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(e.out.String()), "\n")
	var last map[string]any
	for _, l := range lines {
		if err := json.Unmarshal([]byte(l), &last); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
	}
	if last["event"] != "recap" || last["changed"] != 0.0 || last["ok"] != 3.0 {
		t.Errorf("last JSON line = %v", last)
	}
}

func TestTagsSelectPhases(t *testing.T) {
	e := newEnv(t)
	w := steptest.NewWorld()
	e.phases, e.exec = fakePhases(w), w
	cfg := e.writeConfig("192.0.2.10", nil)
	// Without a secret, the capi phase is refused before anything runs...
	if code := e.run("apply", "-c", cfg); code != ExitUsage || !strings.Contains(e.err.String(), "proxmox.tokenSecret: is required for the capi phase") {
		t.Fatalf("exit %d:\n%s", code, e.err.String())
	}
	if len(w.Mutations()) != 0 {
		t.Fatal("a refused run mutated")
	}
	// ...but other phases run without it.
	if code := e.run("apply", "-c", cfg, "--tags", "k3s"); code != 0 {
		t.Fatalf("exit %d:\n%s", code, e.err.String())
	}
	if got := w.Mutations(); len(got) != 1 || got[0] != "write /etc/rancher/k3s/config.yaml" {
		t.Errorf("--tags k3s ran %v", got)
	}
	if code := e.run("apply", "-c", cfg, "--skip-tags", "capi,k3s"); code != 0 {
		t.Fatalf("exit %d:\n%s", code, e.err.String())
	}
	if got := w.Mutations(); len(got) != 2 || got[1] != "write /vm" {
		t.Errorf("--skip-tags ran %v", got)
	}
}

func TestFailedStepExits1WithLogPath(t *testing.T) {
	e := newEnv(t)
	w := steptest.NewWorld()
	e.exec = w
	e.phases = func(*session.Session) []step.Phase {
		return []step.Phase{{Tag: step.TagVM, Steps: []step.Step{
			&steptest.File{StepID: "create-vm", HostName: "pve", Path: "/vm", Content: "x", W: w,
				ApplyErr: errors.New("create VM 110 on pve: unable to create VM 110 - VM 110 already exists on node 'pve'")},
		}}}
	}
	cfg := e.writeConfig("192.0.2.10", nil)
	if code := e.run("apply", "-c", cfg); code != ExitFailed {
		t.Fatalf("exit %d", code)
	}
	logDir := filepath.Join(e.home, ".cache", "mgmtctl", "runs")
	entries, _ := os.ReadDir(logDir)
	if len(entries) != 1 {
		t.Fatalf("debug logs: %v", entries)
	}
	logPath := filepath.Join(logDir, entries[0].Name())
	if !strings.Contains(e.out.String(), "the full debug log is "+logPath) {
		t.Errorf("log path not printed:\n%s", e.out.String())
	}
	if !strings.Contains(e.err.String(), "VM 110 already exists on node 'pve'") {
		t.Errorf("stderr:\n%s", e.err.String())
	}
}

func TestInterruptExits130(t *testing.T) {
	e := newEnv(t)
	w := steptest.NewWorld()
	e.exec = w
	block := make(chan struct{})
	e.phases = func(*session.Session) []step.Phase {
		return []step.Phase{{Tag: step.TagVM, Steps: []step.Step{
			&steptest.Action{StepID: "wait-ssh", HostName: "pve", W: w, Block: block},
			&steptest.File{StepID: "after", HostName: "pve", Path: "/after", Content: "x", W: w},
		}}}
	}
	cfg := e.writeConfig("192.0.2.10", nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-time.After(100 * time.Millisecond); cancel() }()
	code := Execute(ctx, []string{"apply", "-c", cfg}, e.opts())
	if code != ExitInterrupted {
		t.Fatalf("exit %d:\n%s", code, e.err.String())
	}
	if !strings.Contains(e.out.String(), "RECAP") || !strings.Contains(e.out.String(), "interrupted") {
		t.Errorf("no recap after interrupt:\n%s", e.out.String())
	}
	for _, m := range w.Mutations() {
		if m == "write /after" {
			t.Error("a step ran after the interrupt")
		}
	}
}

// sshEnv points a config at a real sshd, with the laptop's known_hosts
// holding its key when known is true.
func sshEnv(t *testing.T, known bool) (*env, *sshtest.Server, string) {
	s := sshtest.Start(t)
	e := newEnv(t)
	if known {
		b, _ := os.ReadFile(s.KnownHosts)
		os.WriteFile(filepath.Join(e.home, ".ssh", "known_hosts"), b, 0o600)
	}
	cfg := e.writeConfig(s.Addr, func(b string) string {
		return b + "    sshPublicKeyFile: " + s.ClientKey + ".pub\n"
	})
	return e, s, cfg
}

func TestUnknownProxmoxHostKeyExits4(t *testing.T) {
	e, s, cfg := sshEnv(t, false)
	// status classes it as apply does.
	if code := e.run("status", "-c", cfg, "--tags", "vm"); code != ExitUnreachable || !strings.Contains(e.out.String(), "is unknown") {
		t.Fatalf("status: exit %d:\n%s%s", code, e.out.String(), e.err.String())
	}
	e.out.Reset()
	e.err.Reset()
	code := e.run("apply", "-c", cfg, "--tags", "vm")
	if code != ExitUnreachable {
		t.Fatalf("exit %d:\n%s%s", code, e.out.String(), e.err.String())
	}
	all := e.out.String() + e.err.String()
	for _, want := range []string{"is unknown", ssh.FingerprintSHA256(s.HostKey), "ssh-keyscan", "never skips host key checks"} {
		if !strings.Contains(all, want) {
			t.Errorf("output lacks %q:\n%s", want, all)
		}
	}
}

func TestUnreachableProxmoxExits4(t *testing.T) {
	e := newEnv(t)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	cfg := e.writeConfig(addr, nil)
	if code := e.run("apply", "-c", cfg, "--tags", "vm"); code != ExitUnreachable {
		t.Fatalf("exit %d:\n%s", code, e.err.String())
	}
	if !strings.Contains(e.err.String(), "connection refused") || !strings.Contains(e.err.String(), "next: check that "+addr+" answers SSH") {
		t.Errorf("stderr:\n%s", e.err.String())
	}
}

// TestConcurrentRunFailsAtOnce: a run holding the Proxmox host's lock makes
// a second run fail immediately, naming the holder; a check run and
// proxmox role, which only read, take no lock.
func TestConcurrentRunFailsAtOnce(t *testing.T) {
	e, s, cfg := sshEnv(t, true)
	holder, err := (&remote.Dialer{}).Connect(context.Background(), remote.Target{Name: "pve", Addr: s.Addr, User: "root",
		KnownHosts: []string{s.KnownHosts}, Identities: []string{s.ClientKey}})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	release, err := holder.Lock(context.Background(), "alice@other-laptop pid 7")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code := e.run("apply", "-c", cfg, "--tags", "vm")
	if code != ExitUnreachable || time.Since(start) > 20*time.Second {
		t.Fatalf("exit %d after %v:\n%s", code, time.Since(start), e.err.String())
	}
	if !strings.Contains(e.err.String(), "locked by another mgmtctl run (alice@other-laptop pid 7 since ") {
		t.Errorf("stderr:\n%s", e.err.String())
	}
	release()
	// With the lock free, the run gets through the connection and the lock,
	// and its preflight reads the node: this sshd is no Proxmox node.
	code = e.run("apply", "-c", cfg, "--tags", "vm")
	if code != ExitFailed || !strings.Contains(e.err.String(), "proxmox: storage local-lvm on pve: pvesh is not on the host: is it a Proxmox VE node?") {
		t.Fatalf("exit %d:\n%s", code, e.err.String())
	}
	// Check mode takes no lock: it works while another run holds it.
	release, err = holder.Lock(context.Background(), "alice@other-laptop pid 7")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if code := e.run("apply", "--check", "-c", cfg, "--tags", "vm"); code != ExitFailed || strings.Contains(e.err.String(), "locked") {
		t.Errorf("check run blocked by the lock: exit %d\n%s", code, e.err.String())
	}
	// Nor does proxmox role, which only reads the node's version (this
	// sshd has no pveversion: it fails on that, not on the lock).
	if code := e.run("proxmox", "role", "-c", cfg); code == ExitUnreachable || strings.Contains(e.err.String(), "locked") || !strings.Contains(e.err.String(), "pveversion") {
		t.Errorf("proxmox role blocked by the lock: exit %d\n%s", code, e.err.String())
	}
}

func TestVersionAndCompletion(t *testing.T) {
	e := newEnv(t)
	if code := e.run("version"); code != 0 || !strings.HasPrefix(e.out.String(), "mgmtctl test\n") {
		t.Errorf("version: %d %q", code, e.out.String())
	}
	if code := e.run("completion", "bash"); code != 0 || !strings.Contains(e.out.String(), "bash completion") {
		t.Errorf("completion: %d", code)
	}
}

func TestKubeconfigCommand(t *testing.T) {
	e := newEnv(t)
	cfg := e.writeConfig("192.0.2.10", nil)
	if code := e.run("kubeconfig", "-c", cfg); code != ExitFailed || !strings.Contains(e.err.String(), "run mgmtctl apply --tags kubeconfig first") {
		t.Fatalf("before apply: %d %s", code, e.err.String())
	}
	admin := "apiVersion: v1\nkind: Config\ncurrent-context: lab-mgmt\nclusters:\n- name: lab-mgmt\n  cluster: {server: \"https://192.0.2.50:6443\"}\nusers:\n- name: lab-mgmt\n  user: {token: t}\ncontexts:\n- name: lab-mgmt\n  context: {cluster: lab-mgmt, user: lab-mgmt}\n"
	p := filepath.Join(e.home, ".kube", "lab-mgmt.kubeconfig")
	os.MkdirAll(filepath.Dir(p), 0o700)
	os.WriteFile(p, []byte(admin), 0o600)
	if code := e.run("kubeconfig", "-c", cfg); code != 0 || strings.TrimSpace(e.out.String()) != p {
		t.Errorf("path: %d %q", code, e.out.String())
	}
	target := filepath.Join(e.dir, "other-config")
	e.vars["KUBECONFIG"] = target + ":" + filepath.Join(e.dir, "second")
	if code := e.run("kubeconfig", "--merge", "-c", cfg); code != 0 || !strings.Contains(e.out.String(), "merged context lab-mgmt into "+target) {
		t.Fatalf("merge: %d %s %s", code, e.out.String(), e.err.String())
	}
	if b, _ := os.ReadFile(target); !strings.Contains(string(b), "https://192.0.2.50:6443") {
		t.Errorf("merged file:\n%s", b)
	}
}

// TestBackupList: backup --list shows the complete backups newest first,
// with their age, and connects nowhere (the config's host is not
// listened on); -o json gives the same for scripts.
func TestBackupList(t *testing.T) {
	e := newEnv(t)
	cfg := e.writeConfig("192.0.2.10", nil)
	dir := filepath.Join(e.home, ".local/share/mgmtctl/backups/lab-mgmt")
	now := time.Now().UTC()
	for name, created := range map[string]time.Time{"older": now.Add(-50 * time.Hour), "newer": now.Add(-90 * time.Minute), "cut-short": {}} {
		os.MkdirAll(filepath.Join(dir, name), 0o700)
		if created.IsZero() {
			continue // no backup.json: an interrupted backup
		}
		man := fmt.Sprintf(`{"cluster":"lab-mgmt","created":%q,"snapshot":"mgmtctl-%s","sha256":"ab","size":2097152,"pins":{"k3s":"v1.35.7+k3s1"}}`, created.Format(time.RFC3339), name)
		os.WriteFile(filepath.Join(dir, name, "backup.json"), []byte(man), 0o600)
	}
	if code := e.run("backup", "--list", "-c", cfg); code != 0 {
		t.Fatalf("exit %d: %s", code, e.err.String())
	}
	lines := strings.Split(strings.TrimSpace(e.out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "WHERE") ||
		!strings.Contains(lines[1], filepath.Join(dir, "newer")) || !strings.Contains(lines[1], " 1h ") ||
		!strings.Contains(lines[2], filepath.Join(dir, "older")) || !strings.Contains(lines[2], " 2d ") || !strings.Contains(lines[2], "2.0 MiB  v1.35.7+k3s1") {
		t.Errorf("listing:\n%s", e.out.String())
	}
	if code := e.run("backup", "--list", "-o", "json", "-c", cfg); code != 0 {
		t.Fatalf("json: exit %d: %s", code, e.err.String())
	}
	var listed []listedBackup
	if err := json.Unmarshal(e.out.Bytes(), &listed); err != nil || len(listed) != 2 || listed[0].Snapshot != "mgmtctl-newer" || listed[0].AgeSecs < 5400 || listed[1].Where != "laptop" {
		t.Errorf("json listing %+v, %v:\n%s", listed, err, e.out.String())
	}
	if code := e.run("backup", "--list", "--to", e.path("none"), "-c", cfg); code != 0 || !strings.Contains(e.out.String(), "no backups in") {
		t.Errorf("no backups: exit %d\n%s", code, e.out.String())
	}
}

// TestRestoreFromS3Refused: a restore from S3 is refused before any
// connection when the name cannot be a snapshot's (usage, exit 2) or the
// config has no bucket (config, exit 2, naming the field).
func TestRestoreFromS3Refused(t *testing.T) {
	e := newEnv(t)
	cfg := e.writeConfig("192.0.2.10", nil)
	if code := e.run("restore", "--from", "s3:../etc/passwd", "--yes", "-c", cfg); code != ExitUsage || !strings.Contains(e.err.String(), "a snapshot name is letters, digits and ._-") {
		t.Errorf("a name that is a path: exit %d\n%s", code, e.err.String())
	}
	if code := e.run("restore", "--from", "s3:etcd-snapshot-lab-mgmt-1764752400", "--yes", "-c", cfg); code != ExitUsage || !strings.Contains(e.err.String(), "spec.backup.s3: is not set: restore --from s3:etcd-snapshot-lab-mgmt-1764752400 needs the bucket") {
		t.Errorf("no bucket configured: exit %d\n%s", code, e.err.String())
	}
	if _, err := os.Stat(filepath.Join(e.home, ".cache", "mgmtctl", "runs")); err == nil {
		t.Error("a refused restore opened a debug log")
	}
}

// TestProxmoxRoleCommand: with --pve-version, proxmox role connects
// nowhere and prints CAPMOX's commands for the config's token, storage
// and bridge; a version mgmtctl does not know is a usage error.
func TestProxmoxRoleCommand(t *testing.T) {
	e := newEnv(t)
	cfg := e.writeConfig("192.0.2.10", nil)
	if code := e.run("proxmox", "role", "--pve-version", "7", "-c", cfg); code != ExitUsage || !strings.Contains(e.err.String(), "--pve-version must be 8 or 9, got 7") {
		t.Errorf("PVE 7: exit %d\n%s", code, e.err.String())
	}
	if code := e.run("proxmox", "role", "--pve-version", "8", "-c", cfg); code != 0 || !strings.Contains(e.out.String(), "pveum role add CAPMOX.VM --privs VM.Allocate,") ||
		!strings.Contains(e.out.String(), "VM.Monitor") || !strings.Contains(e.out.String(), "pveum acl modify /vms --roles CAPMOX.VM --users capmox@pve --tokens 'capmox@pve!capi'") {
		t.Errorf("PVE 8: exit %d\n%s%s", code, e.out.String(), e.err.String())
	}
	if code := e.run("proxmox", "role", "--pve-version", "9", "-o", "json", "-c", cfg); code != 0 {
		t.Fatalf("json: exit %d\n%s", code, e.err.String())
	}
	var got struct {
		PVEVersion int `json:"pveVersion"`
		Grants     []struct {
			Path string `json:"path"`
		} `json:"grants"`
		Commands []string `json:"commands"`
	}
	// Six grants: the disks' storage (local-lvm) and the ISOs' (local)
	// apart; six roles, the user, the token and six ACLs.
	if err := json.Unmarshal(e.out.Bytes(), &got); err != nil || got.PVEVersion != 9 || len(got.Grants) != 6 || got.Grants[2].Path != "/vms" || len(got.Commands) != 13 {
		t.Errorf("json %+v, %v:\n%s", got, err, e.out.String())
	}
	// A pool: the VM role on it, the pool made first; the text says to
	// put the templates in it.
	pooled := e.writeConfig("192.0.2.10", func(s string) string {
		return strings.Replace(s, "    tokenID: capmox@pve!capi\n", "    tokenID: capmox@pve!capi\n    pool: capi\n", 1)
	})
	if code := e.run("proxmox", "role", "--pve-version", "9", "-c", pooled); code != 0 || !strings.Contains(e.out.String(), "\npveum pool add capi\n") ||
		!strings.Contains(e.out.String(), "pveum acl modify /pool/capi --roles CAPMOX.VM ") || strings.Contains(e.out.String(), "acl modify /vms ") ||
		!strings.Contains(e.out.String(), "put the machine templates in it (pveum pool modify capi --vms ID)") {
		t.Errorf("with a pool: exit %d\n%s%s", code, e.out.String(), e.err.String())
	}
}

// TestSkipPreflightNamesAreChecked: a --skip-preflight name no check has
// is a usage error before any connection (a typo skipped nothing,
// silently); a name a check has, "all" and "prerequisites" pass.
func TestSkipPreflightNamesAreChecked(t *testing.T) {
	e := newEnv(t)
	cfg := e.writeConfig("192.0.2.10", nil)
	if code := e.run("apply", "--skip-preflight", "k3s-relase", "-c", cfg); code != ExitUsage ||
		!strings.Contains(e.err.String(), "--skip-preflight k3s-relase: no preflight check has that name") || !strings.Contains(e.err.String(), "k3s-release") {
		t.Errorf("a misspelt name: exit %d\n%s", code, e.err.String())
	}
	if _, err := os.Stat(filepath.Join(e.home, ".cache", "mgmtctl", "runs")); err == nil {
		t.Error("a refused apply opened a debug log")
	}
	checks := []preflight.Check{{Name: "image"}, {Name: "k3s-release"}}
	for _, tc := range []struct {
		skip []string
		ok   bool
	}{
		{nil, true},
		{[]string{"image", "k3s-release"}, true},
		{[]string{"all"}, true},
		{[]string{"prerequisites"}, true},
		{[]string{"image", "imgae"}, false},
	} {
		if err := knownSkips(checks, tc.skip); (err == nil) != tc.ok {
			t.Errorf("%q: %v", tc.skip, err)
		}
	}
}

// TestPreflightHelpSaysItsExitCodes: preflight's help names every exit
// code it has (README, "Exit codes"), 4 among them.
func TestPreflightHelpSaysItsExitCodes(t *testing.T) {
	e := newEnv(t)
	if code := e.run("preflight", "--help"); code != 0 {
		t.Fatalf("exit %d\n%s", code, e.err.String())
	}
	help := strings.Join(strings.Fields(e.out.String()), " ")
	for _, want := range []string{"Exit 0 when all pass", "1 when one fails", "2 for invalid config or usage", "4 when a host cannot be reached"} {
		if !strings.Contains(help, want) {
			t.Errorf("preflight --help lacks %q:\n%s", want, e.out.String())
		}
	}
}

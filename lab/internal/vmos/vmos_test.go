package vmos

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func setRoot(t *testing.T) {
	old := Root
	Root = t.TempDir()
	t.Cleanup(func() { Root = old })
}

func run(f func([]string, *bytes.Buffer, *bytes.Buffer) int, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := f(args, &out, &errb)
	return code, out.String(), errb.String()
}

func apt(a []string, o, e *bytes.Buffer) int    { return AptGet(a, o, e) }
func dpkg(a []string, o, e *bytes.Buffer) int   { return DpkgQuery(a, o, e) }
func sysctl(a []string, o, e *bytes.Buffer) int { return Systemctl(a, o, e) }

func TestAptWaitsForCloudInit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("apt-get insists on root, as upstream")
	}
	setRoot(t)
	code, _, stderr := run(apt, "install", "-y", "qemu-guest-agent")
	if code != 100 || !strings.Contains(stderr, "E: Could not get lock /var/lib/dpkg/lock-frontend") {
		t.Fatalf("while cloud-init runs: %d %q", code, stderr)
	}
	os.MkdirAll(filepath.Join(Root, "run/cloud-init"), 0o755)
	os.WriteFile(filepath.Join(Root, "run/cloud-init/result.json"), []byte("{}"), 0o644)

	if code, _, stderr := run(dpkg, "-W", "-f=${Status}", "qemu-guest-agent"); code != 1 || stderr != "dpkg-query: no packages found matching qemu-guest-agent\n" {
		t.Errorf("dpkg-query before install: %d %q", code, stderr)
	}
	code, out, _ := run(apt, "install", "-y", "qemu-guest-agent")
	if code != 0 || !strings.Contains(out, "0 upgraded, 1 newly installed") || !strings.Contains(out, "Setting up qemu-guest-agent (1:8.2.2+ds-0ubuntu1.4) ...") {
		t.Errorf("install: %d %q", code, out)
	}
	if _, out, _ := run(apt, "install", "-y", "qemu-guest-agent"); !strings.Contains(out, "qemu-guest-agent is already the newest version") {
		t.Errorf("reinstall: %q", out)
	}
	if code, out, _ := run(dpkg, "-W", "-f=${Status}", "qemu-guest-agent"); code != 0 || out != "install ok installed" {
		t.Errorf("dpkg-query: %d %q", code, out)
	}
	if code, _, stderr := run(apt, "install", "-y", "no-such-pkg"); code != 100 || stderr != "E: Unable to locate package no-such-pkg\n" {
		t.Errorf("unknown package: %d %q", code, stderr)
	}

	// The static unit is inactive until started; then active; a boot
	// starts it again (udev), and a restart is logged once.
	if code, out, _ := run(sysctl, "is-active", "qemu-guest-agent"); code != 3 || out != "inactive\n" {
		t.Errorf("is-active: %d %q", code, out)
	}
	if code, _, e := run(sysctl, "start", "qemu-guest-agent"); code != 0 {
		t.Fatalf("start: %s", e)
	}
	if code, out, _ := run(sysctl, "is-active", "qemu-guest-agent.service"); code != 0 || out != "active\n" {
		t.Errorf("is-active after start: %d %q", code, out)
	}
	// ActiveEnterTimestamp: when the unit last became active, in systemd's
	// styles; a restart moves it forward.
	_, before, _ := run(sysctl, "show", "-p", "ActiveEnterTimestamp", "--value", "--timestamp=us+utc", "qemu-guest-agent")
	if _, err := time.Parse("Mon 2006-01-02 15:04:05.000000 MST\n", before); err != nil {
		t.Errorf("ActiveEnterTimestamp (us+utc): %q: %v", before, err)
	}
	if _, out, _ := run(sysctl, "show", "--property=ActiveState,ActiveEnterTimestamp", "--timestamp=unix", "qemu-guest-agent"); !strings.HasPrefix(out, "ActiveState=active\nActiveEnterTimestamp=@") {
		t.Errorf("show: %q", out)
	}
	run(sysctl, "restart", "qemu-guest-agent")
	if _, after, _ := run(sysctl, "show", "-p", "ActiveEnterTimestamp", "--value", "--timestamp=us+utc", "qemu-guest-agent"); after <= before {
		t.Errorf("a restart did not move ActiveEnterTimestamp: %q then %q", before, after)
	}
	log, _ := os.ReadFile(filepath.Join(Root, unitState, "qemu-guest-agent.service.log"))
	if strings.Count(string(log), " restart") != 1 {
		t.Errorf("restart log:\n%s", log)
	}
	Boot()
	if !isActive("qemu-guest-agent.service") {
		t.Error("guest agent not started at boot")
	}
	if code, _, e := run(sysctl, "start", "k3s"); code != 5 || !strings.Contains(e, "Unit k3s.service not found.") {
		t.Errorf("missing unit: %d %q", code, e)
	}
}

// TestNotifyUnitActivating: a Type=notify unit that has not said READY=1
// is "activating" (is-active exits 3), and stop ends it: its start then
// fails, as systemd's job does.
func TestNotifyUnitActivating(t *testing.T) {
	started := startActivating(t)
	if code, _, _ := run(sysctl, "stop", "slow"); code != 0 {
		t.Errorf("stop: %d", code)
	}
	startFailed(t, started)
}

// TestEnvironmentFile: a unit's EnvironmentFile= lines are read in order,
// %N expanded, "-" files optional, quotes and comments as systemd reads
// them; a missing required file fails the start.
func TestEnvironmentFile(t *testing.T) {
	setRoot(t)
	unit := filepath.Join(Root, "etc/systemd/system/k3s.service")
	os.MkdirAll(filepath.Dir(unit), 0o755)
	os.MkdirAll(filepath.Join(Root, "etc/default"), 0o755)
	os.WriteFile(unit, []byte("[Service]\nEnvironmentFile=-/etc/default/%N\nEnvironmentFile=-/etc/sysconfig/%N\nEnvironmentFile=-/etc/systemd/system/k3s.service.env\nExecStart=/bin/true\n"), 0o644)
	os.WriteFile(filepath.Join(Root, "etc/default/k3s"), []byte("# keys\nAWS_ACCESS_KEY_ID=LAB1\n; also a comment\nAWS_SECRET_ACCESS_KEY='a/b+c='\n\nQUOTED=\"x y\"\n"), 0o600)
	got, err := environment(unit, "k3s.service")
	if want := []string{"AWS_ACCESS_KEY_ID=LAB1", "AWS_SECRET_ACCESS_KEY=a/b+c=", "QUOTED=x y"}; err != nil || strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("environment = %q, %v; want %q", got, err, want)
	}
	os.WriteFile(unit, []byte("[Service]\nEnvironmentFile=/etc/default/missing\n"), 0o644)
	if _, err := environment(unit, "k3s.service"); err == nil {
		t.Error("a missing required EnvironmentFile was accepted")
	}
}

// TestMaskRuntime: mask --runtime --now stops a start under way and
// refuses every later one with systemd's words until unmask or a boot;
// is-enabled says masked-runtime (exit 1), as systemd 255 does.
func TestMaskRuntime(t *testing.T) {
	started := startActivating(t)
	if code, _, e := run(sysctl, "mask", "--runtime", "--now", "slow"); code != 0 || e != "Created symlink /run/systemd/system/slow.service → /dev/null.\n" {
		t.Errorf("mask: %d %q", code, e)
	}
	startFailed(t, started)
	if code, out, _ := run(sysctl, "is-enabled", "slow"); code != 1 || out != "masked-runtime\n" {
		t.Errorf("is-enabled: %d %q", code, out)
	}
	for _, verb := range []string{"start", "restart"} {
		if code, _, e := run(sysctl, verb, "slow"); code != 1 || e != "Failed to "+verb+" slow.service: Unit slow.service is masked.\n" {
			t.Errorf("%s: %d %q", verb, code, e)
		}
	}
	if code, _, e := run(sysctl, "mask", "--runtime", "slow"); code != 0 || e != "" {
		t.Errorf("mask again: %d %q", code, e)
	}
	if code, _, e := run(sysctl, "unmask", "--runtime", "slow"); code != 0 || e != "Removed \"/run/systemd/system/slow.service\".\n" {
		t.Errorf("unmask: %d %q", code, e)
	}
	if code, out, _ := run(sysctl, "is-enabled", "slow"); code != 1 || out != "disabled\n" {
		t.Errorf("is-enabled after unmask: %d %q", code, out)
	}
	// A boot clears /run.
	run(sysctl, "mask", "--runtime", "slow")
	Boot()
	if _, out, _ := run(sysctl, "is-enabled", "slow"); out != "disabled\n" {
		t.Errorf("is-enabled after a boot: %q", out)
	}
}

// TestUnitHoldsNoClientDescriptor: systemd forks a unit's process, so it
// never holds what the systemctl client had open, such as a lock its
// shell took (the restore's rejoin holds one until its start returns).
func TestUnitHoldsNoClientDescriptor(t *testing.T) {
	withUnit(t, "idle.service", "[Service]\nExecStart=/bin/sleep 60\n")
	lock := filepath.Join(t.TempDir(), "lock")
	fd, err := syscall.Open(lock, syscall.O_CREAT|syscall.O_RDWR, 0o644) // no O_CLOEXEC: a shell's
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if code, _, e := run(sysctl, "start", "idle"); code != 0 {
		t.Fatalf("start: %s", e)
	}
	b, _ := os.ReadFile(state("idle.service", "active"))
	pid := strings.TrimSpace(string(b))
	defer func() {
		// The test process is the unit's parent here (on a VM the
		// client exits and init reaps it): end and reap it.
		n, _ := strconv.Atoi(pid)
		syscall.Kill(n, syscall.SIGKILL)
		var ws syscall.WaitStatus
		syscall.Wait4(n, &ws, 0, nil)
	}()
	fds, _ := os.ReadDir("/proc/" + pid + "/fd")
	for _, e := range fds {
		if dst, _ := os.Readlink("/proc/" + pid + "/fd/" + e.Name()); dst == lock {
			t.Errorf("the unit's process %s holds the client's %s as fd %s", pid, lock, e.Name())
		}
	}
}

// withUnit gives the test a VM disk of its own (Root) holding one unit
// file; systemctl's jobs insist on root, as upstream's.
func withUnit(t *testing.T, name, unit string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("systemctl start insists on root, as upstream")
	}
	setRoot(t)
	os.MkdirAll(filepath.Join(Root, "etc/systemd/system"), 0o755)
	os.WriteFile(filepath.Join(Root, "etc/systemd/system", name), []byte(unit), 0o644)
	os.MkdirAll(filepath.Join(Root, "var/log"), 0o755)
}

// startActivating starts slow.service, a Type=notify unit that never says
// READY=1, and returns once is-active says activating (exit 3), with the
// channel its start's exit code arrives on.
func startActivating(t *testing.T) <-chan int {
	t.Helper()
	withUnit(t, "slow.service", "[Service]\nType=notify\nExecStart=/bin/sleep 60\n")
	started := make(chan int, 1)
	go func() {
		code, _, _ := run(sysctl, "start", "slow")
		started <- code
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, out, _ := run(sysctl, "is-active", "slow")
		if out == "activating\n" && code == 3 {
			return started
		}
		if time.Now().After(deadline) {
			t.Fatalf("never activating: %d %q", code, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startFailed checks that the start startActivating made fails (exit 1),
// as systemd's job does when its unit is stopped while activating, and
// that the unit is inactive then.
func startFailed(t *testing.T, started <-chan int) {
	t.Helper()
	select {
	case code := <-started:
		if code != 1 {
			t.Errorf("the start under way: exit %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the start under way never returned")
	}
	if code, out, _ := run(sysctl, "is-active", "slow"); code != 3 || out != "inactive\n" {
		t.Errorf("after the stop: %d %q", code, out)
	}
}

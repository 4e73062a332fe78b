// Package labtest gives end-to-end tests a running lab, one per test,
// removed when the test ends; with LABSIM_KEEP=1 a failed test's lab is
// left up and its directory printed. Its binaries are the repository's
// bin/, brought up to date once per test binary by hack/build.sh. Under
// -short a lab test skips; where a lab cannot run (not root, no network
// namespaces, no OpenSSH server) it fails, saying why.
package labtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/lab/internal/lab"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// Kubectl is the path of the lab's kubectl (built with BinDir).
func Kubectl(t testing.TB) string { return filepath.Join(BinDir(t), "kubectl") }

// Helm is the path of Helm's CLI, built from the Helm module the lab's
// klipper-helm links (built with BinDir).
func Helm(t testing.TB) string { return filepath.Join(BinDir(t), "helm") }

// Clusterctl is the path of upstream's clusterctl (built with BinDir).
func Clusterctl(t testing.TB) string { return filepath.Join(BinDir(t), "clusterctl") }

// thisDir is lab/labtest: the lab module is its parent, the repository's
// root its grandparent.
func thisDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// builtEnv, set to the repository's root, says bin/ was brought up to
// date by hack/build.sh all just before the tests started (make test).
const builtEnv = "MGMTCTL_BIN_BUILT"

// BinDir brings the repository's bin/ up to date once per test binary and
// returns it: hack/build.sh, the same build `make build` runs, so the tests
// run the binaries a user runs, built once for every test binary and for
// the demo. go build rebuilds only what changed (an up-to-date binary is
// not even relinked), and build.sh holds a lock on bin/ so that test
// binaries run side by side (go test -p) do not build at once.
func BinDir(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := filepath.Abs(filepath.Join(thisDir(), "..", ".."))
		if err != nil {
			buildErr = err
			return
		}
		// make test has just run hack/build.sh all itself, and says so:
		// another look, per test binary, costs each one 15 to 20
		// CPU-seconds of go build's staleness checks for nothing.
		if os.Getenv(builtEnv) == root {
			binDir = filepath.Join(root, "bin")
			return
		}
		cmd := exec.Command("bash", filepath.Join(root, "hack", "build.sh"), "all")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("hack/build.sh: %v\n%s", err, out)
			return
		}
		binDir = filepath.Join(root, "bin")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// Binary is labsim's path in bin/ (the k3s simulator, upstream's
// binaries and kubectl beside it), built with BinDir.
func Binary(t testing.TB) string {
	t.Helper()
	return filepath.Join(BinDir(t), "labsim")
}

// Mgmtctl is the tool's path in bin/, built with BinDir.
func Mgmtctl(t testing.TB) string {
	t.Helper()
	return filepath.Join(BinDir(t), "mgmtctl")
}

// MgmtctlRace is the tool built with Go's race detector
// (bin/mgmtctl-race, which `hack/build.sh race` builds: make
// test-race-e2e), for the end-to-end tests of a cluster of servers.
func MgmtctlRace(t testing.TB) string {
	t.Helper()
	p := filepath.Join(BinDir(t), "mgmtctl-race")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%v: build it with hack/build.sh race (make test-race-e2e does)", err)
	}
	return p
}

// Skip skips t under -short (the unit tests alone: make test-unit) and
// fails it where a lab cannot run (not root, no network namespaces, no
// OpenSSH server): a suite that skipped every lab test would pass having
// tested nothing.
func Skip(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the unit tests alone (make test-unit); this one runs in a lab")
	}
	if err := CanRun(); err != nil {
		t.Fatalf("%v: run hack/install-deps.sh as root, then the tests as root (or make test-unit for the unit tests alone)", err)
	}
}

// CanRun says why a lab cannot run here, or nil.
func CanRun() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the lab needs root (network namespaces and mounts)")
	}
	for _, tool := range []string{"ip", "nft", "unshare", "nsenter", "ssh", "ssh-keygen", "/usr/sbin/sshd"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("the lab needs %s", tool)
		}
	}
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil {
		return fmt.Errorf("no network namespaces here: %v %s", err, out)
	}
	return nil
}

// Lab is a running lab.
type Lab struct {
	*lab.Lab
	t   testing.TB
	Bin string
}

// Start brings a lab up in a fresh directory for the test.
func Start(t testing.TB) *Lab {
	t.Helper()
	return StartNodes(t, 1)
}

// StartNodes is Start with a Proxmox cluster of n nodes (pve1..pveN).
func StartNodes(t testing.TB, n int) *Lab {
	t.Helper()
	Skip(t)
	bin := Binary(t)
	holdSlot(t)
	tl, err := newLab(t, bin, "lab-")
	if err != nil {
		t.Fatal(err)
	}
	tl.up(n, true)
	return tl
}

// newLab is a lab for t in a new directory named from prefix, not up yet.
func newLab(t testing.TB, bin, prefix string) (*Lab, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	l, err := lab.Open(dir)
	if err != nil {
		return nil, err
	}
	return &Lab{Lab: l, t: t, Bin: bin}, nil
}

// up runs labsim up in the lab's directory (a new one, or a template's
// copy) and, with owned, registers its removal when the test ends.
func (tl *Lab) up(n int, owned bool) {
	t, dir := tl.t, tl.Dir
	if out, err := exec.Command(tl.Bin, "up", "--dir", dir, "--nodes", strconv.Itoa(n)).CombinedOutput(); err != nil {
		tl.down()
		t.Fatalf("labsim up: %v\n%s", err, out)
	}
	// Which lab is whose: a failed test's lab is found by its directory,
	// and a host's processes by its namespaces' prefix (docs/testing.md
	// counts each test's CPU by it).
	t.Logf("lab up in %s (namespaces %s-*)", dir, tl.Net.Prefix)
	if !owned {
		return
	}
	t.Cleanup(func() {
		if t.Failed() && os.Getenv("LABSIM_KEEP") != "" {
			t.Logf("lab left up for inspection: %s (remove with: labsim down --dir %s)", dir, dir)
			return
		}
		tl.down()
	})
}

func (l *Lab) down() {
	if out, err := exec.Command(l.Bin, "down", "--dir", l.Dir).CombinedOutput(); err != nil {
		l.t.Errorf("labsim down: %v\n%s", err, out)
	}
}

// Result is a finished command.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// Run runs argv in the lab (host "" is the laptop) and returns its result.
func (l *Lab) Run(hostName string, argv ...string) Result {
	l.t.Helper()
	full, err := l.ExecArgv(hostName, argv)
	if err != nil {
		l.t.Fatal(err)
	}
	cmd := exec.Command(full[0], full[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		l.t.Fatalf("run %v: %v", argv, err)
	}
	return Result{Stdout: out.String(), Stderr: errb.String(), Code: code}
}

// SSH runs a command line on user@addr from the laptop with plain OpenSSH,
// the lab's key, and the given known_hosts file (the laptop's by default).
func (l *Lab) SSH(user, addr, knownHosts, command string) Result {
	l.t.Helper()
	if knownHosts == "" {
		knownHosts = filepath.Join(l.LaptopHome(), ".ssh/known_hosts")
	}
	return l.Run("", "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
		"-o", "UserKnownHostsFile="+knownHosts, "-o", "StrictHostKeyChecking=yes",
		"-i", filepath.Join(l.LaptopHome(), ".ssh/id_ed25519"), user+"@"+addr, command)
}

// PVE runs a command line on the Proxmox node (the first of a cluster)
// as root over SSH.
func (l *Lab) PVE(command string) Result {
	l.t.Helper()
	return l.SSH("root", lab.PVEAddr, "", command)
}

// OnNode runs a command line on the named Proxmox node as root over SSH.
func (l *Lab) OnNode(name, command string) Result {
	l.t.Helper()
	for _, n := range l.Nodes() {
		if n.Name == name {
			return l.SSH("root", n.Addr, "", command)
		}
	}
	l.t.Fatalf("no Proxmox node %q in the lab", name)
	return Result{}
}

// WaitVM blocks until VM vmid's boot has ended; it fails the test if the
// VM did not come up.
func (l *Lab) WaitVM(vmid int) error {
	_, err := lab.Call(l.ControlSocket(), lab.Request{Op: "wait-vm", VMID: vmid}, 2*time.Minute)
	return err
}

// VMHostKey returns the VM's public ed25519 host key as it generated it.
func (l *Lab) VMHostKey(vmid int) string {
	b, err := os.ReadFile(filepath.Join(l.VMDisk(vmid), "ssh_host_ed25519_key.pub"))
	if err != nil {
		l.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// For is the lab as seen from t (a subtest of the test that started it):
// its commands fail t, not the test that started the lab.
func (l *Lab) For(t testing.TB) *Lab {
	c := *l
	c.t = t
	return &c
}

// Package labtest gives end-to-end tests a running lab. The lab is built
// once per test binary from this module's labsim and removed when the test
// ends; with LABSIM_KEEP=1 a failed test's lab is left up and its directory
// printed. Tests skip, saying why, where a lab cannot run (not root, no
// network namespaces, no OpenSSH server).
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

	"github.com/mgmtctl/mgmtctl/lab/internal/catalog"
	"github.com/mgmtctl/mgmtctl/lab/internal/fixtures"
	"github.com/mgmtctl/mgmtctl/lab/internal/klipperhelm"
	"github.com/mgmtctl/mgmtctl/lab/internal/lab"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// KubectlLDFlags stamps the Kubernetes version the lab is built from.
const KubectlLDFlags = "-X k8s.io/component-base/version.gitVersion=v1.36.3 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36"

// Versions of upstream's binaries the lab builds from lab/upstream (as
// hack/build.sh does): the module versions lab/upstream/go.mod requires,
// which the lab's CRDs are taken at too.
var (
	OperatorVersion   = fixtures.Operator.Version
	ClusterctlVersion = fixtures.ClusterAPI.Version
	// CertManagerVersion is the cert-manager lab/certmanager/go.mod
	// requires; CertManagerVersions all the versions the lab's chart
	// repository serves, whose controllers the lab builds (the others
	// with lab/certmanager/<version>.mod), stamped as upstream's release
	// build stamps them (pkg/util.AppVersion).
	CertManagerVersion  = fixtures.CertManager.Version
	CertManagerVersions = catalog.ChartVersions("cert-manager")
)

// Kubectl is the path of the lab's kubectl (built with Binary).
func Kubectl(t testing.TB) string { return filepath.Join(filepath.Dir(Binary(t)), "kubectl") }

// Helm is the path of Helm's CLI, built from the Helm module the lab's
// klipper-helm links (built with Binary).
func Helm(t testing.TB) string { return filepath.Join(filepath.Dir(Binary(t)), "helm") }

// Clusterctl is the path of upstream's clusterctl (built with Binary).
func Clusterctl(t testing.TB) string { return filepath.Join(filepath.Dir(Binary(t)), "clusterctl") }

// thisDir is lab/labtest: the lab module is its parent, and lab/upstream,
// the module upstream's binaries build in, is beside it.
func thisDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Binary builds labsim (with the k3s simulator and kubectl beside it) once
// and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "labsim-bin-")
		if err != nil {
			buildErr = err
			return
		}
		// labsim finds the k3s simulator beside itself.
		binPath = filepath.Join(dir, "labsim")
		// The lab's own binaries, then upstream's operator (run by the
		// lab's kubelet) and clusterctl, each in its module.
		lab, upstream, cm := filepath.Join(thisDir(), ".."), filepath.Join(thisDir(), "..", "upstream"), filepath.Join(thisDir(), "..", "certmanager")
		type build struct {
			module, out, pkg, ldflags string
			modfile                   string // go.mod's when empty
		}
		builds := []build{
			{lab, binPath, "github.com/mgmtctl/mgmtctl/lab/cmd/labsim", KubectlLDFlags, ""},
			{lab, filepath.Join(dir, "k3s"), "github.com/mgmtctl/mgmtctl/lab/cmd/k3s", KubectlLDFlags, ""},
			{lab, filepath.Join(dir, "kubectl"), "github.com/mgmtctl/mgmtctl/lab/cmd/kubectl", KubectlLDFlags, ""},
			{lab, filepath.Join(dir, "helm"), "helm.sh/helm/v3/cmd/helm", "-X helm.sh/helm/v3/internal/version.version=" + klipperhelm.HelmVersion, ""},
			{upstream, filepath.Join(dir, "cluster-api-operator-"+OperatorVersion), "sigs.k8s.io/cluster-api-operator/cmd", "-X sigs.k8s.io/cluster-api-operator/version.gitVersion=" + OperatorVersion, ""},
			{upstream, filepath.Join(dir, "clusterctl"), "sigs.k8s.io/cluster-api/cmd/clusterctl", "-X sigs.k8s.io/cluster-api/version.gitVersion=" + ClusterctlVersion, ""},
		}
		// cert-manager's commands at each version the lab's chart
		// repository serves (go.mod's, the others by their modfile):
		// one binary, linked under each component's name.
		for _, v := range CertManagerVersions {
			modfile := ""
			if v != CertManagerVersion {
				modfile = v + ".mod"
			}
			builds = append(builds, build{cm, filepath.Join(dir, "cert-manager-"+v), ".",
				"-X github.com/cert-manager/cert-manager/pkg/util.AppVersion=" + v, modfile})
		}
		for _, b := range builds {
			args := []string{"-C", b.module, "build", "-ldflags", b.ldflags, "-o", b.out}
			if b.modfile != "" {
				args = append(args, "-modfile="+b.modfile)
			}
			out, err := exec.Command("go", append(args, b.pkg)...).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("build %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
		for _, v := range CertManagerVersions {
			for _, c := range []string{"controller", "webhook", "cainjector", "startupapicheck"} {
				if err := os.Symlink("cert-manager-"+v, filepath.Join(dir, "cert-manager-"+c+"-"+v)); err != nil {
					buildErr = err
					return
				}
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// Skip skips t unless a lab can run here.
func Skip(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the lab needs root (network namespaces and mounts)")
	}
	for _, tool := range []string{"ip", "nft", "unshare", "nsenter", "ssh", "ssh-keygen", "/usr/sbin/sshd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the lab needs %s (.ci/run installs it)", tool)
		}
	}
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil {
		t.Skipf("no network namespaces here: %v %s", err, out)
	}
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
	dir, err := os.MkdirTemp("", "lab-")
	if err != nil {
		t.Fatal(err)
	}
	l, err := lab.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	tl := &Lab{Lab: l, t: t, Bin: bin}
	if out, err := exec.Command(bin, "up", "--dir", dir, "--nodes", strconv.Itoa(n)).CombinedOutput(); err != nil {
		tl.down()
		t.Fatalf("labsim up: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() && os.Getenv("LABSIM_KEEP") != "" {
			t.Logf("lab left up for inspection: %s (remove with: labsim down --dir %s)", dir, dir)
			return
		}
		tl.down()
	})
	return tl
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

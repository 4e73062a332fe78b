// Package lab builds and tears down the simulated lab: network namespaces
// for the laptop, the Proxmox node, the mirror and each VM; a daemon that
// owns the hosts and boots VMs when the simulated `qm start` asks; and the
// files a user needs to run mgmtctl inside it.
package lab

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mgmtctl/mgmtctl/lab/internal/netns"
)

// Fixed addresses of the lab's hosts (TEST-NET-1).
const (
	LaptopAddr = "192.0.2.2"
	PVEAddr    = "192.0.2.10"
	MirrorAddr = "192.0.2.20"
	VMAddr     = "192.0.2.50"
	// VIPAddr is the API VIP of the highly available config (HAConfigPath).
	VIPAddr = "192.0.2.60"
	Node    = "pve"
	VMID    = 110
)

// K3sReleases are the k3s versions the lab's mirror has released; the
// first is the stable channel's.
var K3sReleases = []string{"v1.35.7+k3s1", "v1.36.3+k3s1", "v1.34.10+k3s1", "v1.35.8+k3s1"}

// MirrorNames are the internet names the mirror answers for.
var MirrorNames = []string{
	"cloud-images.ubuntu.com", "get.k3s.io", "update.k3s.io", "github.com", "api.github.com", "objects.githubusercontent.com",
	"charts.jetstack.io", "kubernetes-sigs.github.io", "quay.io", "registry.k8s.io", "ghcr.io",
}

// Lab is one lab, kept in Dir.
type Lab struct {
	Dir string
	Net netns.Net
	// NodeCount is how many Proxmox nodes Up builds (0: one).
	NodeCount int
}

// ProxmoxNode is one node of the lab's Proxmox cluster: its name is its
// hostname, its SSH host name in the lab and its pmxcfs node name.
type ProxmoxNode struct{ Name, Addr string }

// nodesFor names n nodes: "pve" alone (the lab as it always was), or
// pve1..pveN of a cluster, from 192.0.2.10 up.
func nodesFor(n int) []ProxmoxNode {
	if n <= 1 {
		return []ProxmoxNode{{Node, PVEAddr}}
	}
	out := make([]ProxmoxNode, n)
	for i := range out {
		out[i] = ProxmoxNode{fmt.Sprintf("pve%d", i+1), fmt.Sprintf("192.0.2.%d", 10+i)}
	}
	return out
}

// Nodes are the lab's Proxmox nodes, as Up recorded them.
func (l *Lab) Nodes() []ProxmoxNode {
	b, err := os.ReadFile(l.path("nodes"))
	if err != nil {
		return nodesFor(1)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return nodesFor(n)
}

// Pmxcfs is the directory every node mounts as /etc/pve.
func (l *Lab) Pmxcfs() string { return l.path("pmxcfs") }

// Open returns the lab for dir (which need not exist yet). The namespace
// prefix is derived from the absolute path, so two labs never collide and
// a lab's leftovers can always be found again.
func Open(dir string) (*Lab, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(abs))
	return &Lab{Dir: abs, Net: netns.Net{Prefix: "ml" + hex.EncodeToString(sum[:3])}}, nil
}

func (l *Lab) path(p ...string) string { return filepath.Join(append([]string{l.Dir}, p...)...) }

// Paths a user and the tests rely on.
func (l *Lab) ConfigPath() string { return l.path("mgmt.yaml") }

// HAConfigPath is the highly available config labsim up writes for a
// cluster of three or more nodes.
func (l *Lab) HAConfigPath() string  { return l.path("ha.yaml") }
func (l *Lab) SecretsPath() string   { return l.path("secrets.yaml") }
func (l *Lab) LaptopHome() string    { return l.path("laptop", "home") }
func (l *Lab) ControlSocket() string { return l.path("control.sock") }
func (l *Lab) Binary() string        { return l.path("bin", "labsim") }

// K3sBinary is the k3s simulator the mirror releases.
func (l *Lab) K3sBinary() string { return l.path("bin", "k3s") }

// LaptopHosts is the laptop's /etc/hosts in the lab: the machine's own,
// plus the internet's names at the mirror.
func (l *Lab) LaptopHosts() string         { return l.path("laptop", "hosts") }
func (l *Lab) HostDisk(name string) string { return l.path("hosts", name) }

// HostLog is where a host's agent and its sshd log ("pve", "vm110").
func (l *Lab) HostLog(name string) string   { return l.path("hosts", name+".log") }
func (l *Lab) VMDisk(vmid int) string       { return l.path("vms", fmt.Sprint(vmid)) }
func (l *Lab) FaultPath(name string) string { return l.path("faults", name) }

// TokenPath holds the API token the simulated Proxmox accepts:
// "<tokenid> <secret>".
func (l *Lab) TokenPath() string { return l.path("pki", "pve-token") }

// UserCfgPath is the Proxmox cluster's /etc/pve/user.cfg: users, tokens,
// roles and ACLs (pveum's).
func (l *Lab) UserCfgPath() string { return l.path("pmxcfs", "user.cfg") }

// made lists what Up creates in Dir, so Down removes exactly that.
var made = []string{".labsim", "bin", "crds", "providers", "hosts", "vms", "laptop", "mirror", "pki", "faults", "mgmt.yaml", "secrets.yaml", "pmxcfs", "nodes",
	"control.sock", "daemon.log", "daemon.pid", "state.json", BuildsFile, "ha.yaml"}

func (l *Lab) marker() string { return l.path(".labsim") }

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Package proxmox holds the vm phase's steps: they run on the Proxmox node
// over SSH as root with qm, or through the Proxmox VE API with mgmtctl's
// own token (spec.proxmox.access: api, api.go), deciding from facts
// gathered in one round trip.
package proxmox

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/pve"
	"github.com/mgmtctl/mgmtctl/internal/remote"
)

// ManagedTag marks the VMs mgmtctl created (qm --tags).
const ManagedTag = "mgmtctl"

// Facts are what the vm phase knows about the node.
type Facts struct {
	VMExists bool
	Config   map[string]string // qm config, when the VM exists
	Running  bool
	// Uptime is how long the running VM has run since its start (qm
	// status --verbose).
	Uptime time.Duration
	// At is when the facts were read (the laptop's clock): At - Uptime is
	// when the VM booted.
	At time.Time
	// ImageSHA256 is the sum of the file at the image's path, "" if absent.
	// In api access, the image's volume (ImageVolID) present is the sum
	// verified: Proxmox checked it as it downloaded the file, and the
	// name carries it.
	ImageSHA256 string
	// OnNode is the node whose config holds the VM (api access, which
	// sees the whole cluster): another node than the spec's is a VM this
	// run must not touch.
	OnNode string
}

// Spec is what the vm phase needs of mgmt.yaml, typed and validated.
type Spec struct {
	Node        string // the Proxmox node's name
	Storage     string
	ImageDir    string
	ImageURL    string
	ImageSHA256 string
	VMID        int
	Name        string // the VM's name: the cluster's
	Cores       int
	MemoryMiB   int
	DiskGiB     int
	Bridge      string
	VLAN        int          // 0: an untagged port
	Net         netip.Prefix // the VM's address and prefix length
	Gateway     string
	Nameservers []string
	User        string // the cloud-init user
	// ImageStorage is the directory storage whose 'import' content holds
	// the image in api access.
	ImageStorage string
}

// Node is the Proxmox node of one run: its connection and facts, shared by
// the vm phase's steps. The facts are observations, read again by a step
// that changed them (its Finish); no step leaves a note for another here:
// that this run created the VM is the laptop's record of a new VM (written
// by create-vm's plan), and that it started it is the VM's uptime.
type Node struct {
	Spec Spec
	// Host is the node over SSH; API the Proxmox API instead (api
	// access). Exactly one is set.
	Host  remote.Reader
	API   pve.Reader
	Facts Facts
}

// BootedAt is when the running VM booted, by its uptime.
func (f Facts) BootedAt() time.Time { return f.At.Add(-f.Uptime) }

// Name is the node as the recap shows it.
func (n *Node) Name() string { return n.Spec.Node }

// VMID as a string for qm.
func (n *Node) VMID() string { return strconv.Itoa(n.Spec.VMID) }

// ImagePath is where the cloud image is kept on the node.
func (n *Node) ImagePath() string {
	u, err := url.Parse(n.Spec.ImageURL)
	if err != nil {
		return ""
	}
	return path.Join(n.Spec.ImageDir, path.Base(u.Path))
}

// run is the effect of running c on the node.
func (n *Node) run(c remote.Cmd) effect.Run { return effect.Run{Host: n.Name(), Cmd: c} }

// Gather reads every fact in one round trip.
func (n *Node) Gather(ctx context.Context) error { return n.gather(ctx, true) }

// GatherVM reads the VM's facts only (it exists, runs, since when), in
// one round trip: not the image's sha256, which reads the whole image.
func (n *Node) GatherVM(ctx context.Context) error { return n.gather(ctx, false) }

func (n *Node) gather(ctx context.Context, image bool) error {
	if n.API != nil {
		return n.gatherAPI(ctx, image)
	}
	reads := []remote.Query{remote.QMConfig(n.VMID()), remote.QMStatus(n.VMID())}
	if image {
		reads = append(reads, remote.VerifiedSHA256(n.ImagePath()))
	}
	res, err := remote.Batch(ctx, n.Host, false, reads...)
	if err != nil {
		return fmt.Errorf("gather facts: %w", err)
	}
	f := Facts{At: time.Now()}
	switch {
	case res[0].ExitCode == 0:
		f.VMExists = true
		f.Config = ParseConfig(string(res[0].Stdout))
	case missingVM(res[0].Stderr):
	default:
		return fmt.Errorf("qm config %s exited %d: %s", n.VMID(), res[0].ExitCode, strings.TrimSpace(string(res[0].Stderr)))
	}
	if f.VMExists {
		st := ParseConfig(string(res[1].Stdout))
		f.Running = st["status"] == "running"
		if secs, err := strconv.Atoi(st["uptime"]); err == nil && f.Running {
			f.Uptime = time.Duration(secs) * time.Second
		}
	}
	if image {
		if sum := strings.Fields(string(res[2].Stdout)); res[2].ExitCode == 0 && len(sum) > 0 {
			f.ImageSHA256 = sum[0]
		}
	}
	n.Facts = f
	return nil
}

// ParseConfig reads `qm config` output (and `qm status --verbose`'s, which
// prints its top-level keys the same way).
func ParseConfig(out string) map[string]string {
	c := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			c[k] = v
		}
	}
	return c
}

// Ours reports whether the VM in the facts is mgmtctl's for this cluster.
func (n *Node) Ours() bool { return ours(n.Facts.Config, n.Spec.Name) }

// ours says a VM's config (its name and tags) is mgmtctl's VM of that
// name: the name, and the tag among the VM's.
func ours(conf map[string]string, name string) bool {
	if conf["name"] != name {
		return false
	}
	for _, t := range strings.FieldsFunc(conf["tags"], func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
		if t == ManagedTag {
			return true
		}
	}
	return false
}

// DiskBytes is scsi0's size from the facts.
func (n *Node) DiskBytes() (int64, bool) {
	for _, o := range strings.Split(n.Facts.Config["scsi0"], ",") {
		if v, ok := strings.CutPrefix(o, "size="); ok {
			return parseSize(v)
		}
	}
	return 0, false
}

func parseSize(s string) (int64, bool) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult = 1 << 10
	case strings.HasSuffix(s, "M"):
		mult = 1 << 20
	case strings.HasSuffix(s, "G"):
		mult = 1 << 30
	case strings.HasSuffix(s, "T"):
		mult = 1 << 40
	}
	f, err := strconv.ParseFloat(strings.TrimRight(s, "KMGT"), 64)
	if err != nil {
		return 0, false
	}
	return int64(f * float64(mult)), true
}

// missingVM reports whether qm said the VM's config does not exist
// (`Configuration file 'nodes/<node>/qemu-server/<vmid>.conf' does not
// exist`, pve-guest-common src/PVE/AbstractConfig.pm load_config;
// docs/upstream.md §1.1). qm's stderr and a non-zero exit are all it says: its exit code
// for this case is not documented.
func missingVM(stderr []byte) bool {
	return strings.Contains(string(stderr), "Configuration file '") && strings.Contains(string(stderr), ".conf' does not exist")
}

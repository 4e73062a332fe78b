package proxmox

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/shell"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// CreateVM creates the VM from the cloud image in one qm create, marked as
// mgmtctl's; for a VM that exists it checks ownership and reports drift.
type CreateVM struct {
	N *Node
	// AuthorizedKey is the VM user's public key line.
	AuthorizedKey string
	// Marker is the laptop file that records this VM as new, written
	// just before qm create, so its host key may be learned even if the
	// run dies right after creating it; empty for none. MarkerContent is
	// what it says (which run created the VM).
	Marker        string
	MarkerContent []byte
	// KnownHosts is the laptop's known_hosts file for the VMs and Addr
	// the VM's SSH address: an entry there is an earlier VM's key, which
	// the new VM's first contact replaces, so the plan forgets it.
	KnownHosts, Addr string
}

var _ step.Finisher = (*CreateVM)(nil)

// ID implements step.Step.
func (s *CreateVM) ID() string { return "create-vm" }

// Host implements step.Step.
func (s *CreateVM) Host() string { return s.N.Name() }

func (s *CreateVM) keysFile() string {
	return "/root/.mgmtctl-sshkeys-" + s.N.VMID() + ".pub"
}

// options are the VM's settings, as qm create and the API's create_vm
// take them (qemu-server src/PVE/API2/Qemu.pm create_vm; docs/upstream.md
// §1.2), but the user's key, which each takes its own way.
func (s *CreateVM) options() [][2]string {
	vm := s.N.Spec
	net := "virtio,bridge=" + vm.Bridge
	if vm.VLAN != 0 {
		net += ",tag=" + strconv.Itoa(vm.VLAN)
	}
	return [][2]string{
		{"name", vm.Name},
		{"cores", strconv.Itoa(vm.Cores)},
		{"memory", strconv.Itoa(vm.MemoryMiB)},
		{"net0", net},
		{"scsihw", "virtio-scsi-pci"},
		{"scsi0", vm.Storage + ":0,import-from=" + s.N.imageSource()},
		{"ide2", vm.Storage + ":cloudinit"},
		{"boot", "order=scsi0"},
		{"serial0", "socket"},
		{"vga", "serial0"},
		{"agent", "1"},
		{"ciuser", vm.User},
		{"ipconfig0", "ip=" + vm.Net.String() + ",gw=" + vm.Gateway},
		{"nameserver", strings.Join(vm.Nameservers, " ")},
		{"tags", ManagedTag},
	}
}

// CreateArgs is the qm create command line: the options, with --sshkeys
// the file on the node that holds the user's key.
func (s *CreateVM) CreateArgs() []string {
	args := []string{"qm", "create", s.N.VMID()}
	for _, o := range s.options() {
		args = append(args, "--"+o[0], o[1])
		if o[0] == "ciuser" {
			args = append(args, "--sshkeys", s.keysFile())
		}
	}
	return args
}

// Check implements step.Step. It is the example of a remote command step:
// the plan carries the commands, --diff shows their lines, the engine runs
// them: the laptop's record of the new VM, the user's public key written
// to a file on the node for qm's --sshkeys, the qm create command, and the
// key file's removal once qm has read it (whether qm created the VM or not).
func (s *CreateVM) Check(ctx context.Context) (step.Plan, error) {
	n := s.N
	if !n.Facts.VMExists && n.API != nil {
		return s.createAPI()
	}
	if !n.Facts.VMExists {
		keys := remote.File{Path: s.keysFile(), Content: []byte(s.AuthorizedKey + "\n"), Mode: 0o600}
		create, cleanup := remote.Command(s.CreateArgs()...), remote.Command("rm", "-f", "--", s.keysFile())
		effects, also, err := s.laptopRecords()
		if err != nil {
			return step.Plan{}, err
		}
		effects = append(effects, effect.Write{Host: n.Name(), File: keys}, n.run(create), effect.Run{Host: n.Name(), Cmd: cleanup, Always: true})
		var lines []string
		for _, cmd := range []remote.Cmd{create, cleanup} {
			line, err := shell.Join(cmd.Args...)
			if err != nil {
				return step.Plan{}, err
			}
			lines = append(lines, line)
		}
		summary := fmt.Sprintf("create VM %s (%s) from %s", n.VMID(), n.Spec.Name, n.ImagePath()) + also
		return step.Plan{Changes: []step.Change{{Target: "VM " + n.VMID(), Action: step.Create, Summary: summary,
			Diff: &step.Diff{Path: "qm create", After: "# " + keys.Path + ": the user's public key (0600)\n" + strings.Join(lines, "\n") + "\n"}, Effects: effects}}}, nil
	}
	if n.Facts.OnNode != "" && n.Facts.OnNode != n.Spec.Node {
		return step.Plan{}, fmt.Errorf("VM %s (name %q) is on node %s, but the config puts it on %s; nothing was touched: migrate it back, or set the node it is on",
			n.VMID(), n.Facts.Config["name"], n.Facts.OnNode, n.Spec.Node)
	}
	if !n.Ours() {
		return step.Plan{}, fmt.Errorf("VMID %s belongs to another VM (name %q, tags %q), not to mgmtctl's %q; nothing was touched: choose a free VMID (pvesh get /cluster/nextid)",
			n.VMID(), n.Facts.Config["name"], n.Facts.Config["tags"], n.Spec.Name)
	}
	return step.Plan{Note: fmt.Sprintf("VM %s (%s) exists", n.VMID(), n.Spec.Name), Warnings: s.Drift()}, nil
}

// Drift lists differences mgmtctl reports but leaves alone: it does not
// reconfigure a VM's hardware or cloud-init settings in this version.
func (s *CreateVM) Drift() []string {
	c := s.N.Facts.Config
	want := map[string]string{}
	for _, o := range s.options() {
		want[o[0]] = o[1]
	}
	var out []string
	for _, k := range []string{"cores", "memory", "ciuser", "ipconfig0", "nameserver"} {
		if c[k] != want[k] {
			out = append(out, fmt.Sprintf("VM %s %s is %q, config says %q (left alone)", s.N.VMID(), k, c[k], want[k]))
		}
	}
	// net0 carries a MAC first; compare the rest.
	got := strings.SplitN(c["net0"], ",", 2)
	wantNet := strings.SplitN(want["net0"], ",", 2)
	if len(got) < 2 || len(wantNet) < 2 || got[1] != wantNet[1] {
		out = append(out, fmt.Sprintf("VM %s net0 is %q, config says %q (left alone)", s.N.VMID(), c["net0"], want["net0"]))
	}
	return out
}

// laptopRecords are the laptop's part of creating the VM, before it is
// created (over SSH or through the API alike): the record of it as new,
// and forgetting the host key an earlier VM left at its address; also is
// what the summary adds for them.
func (s *CreateVM) laptopRecords() (effects []effect.Effect, also string, err error) {
	if s.Marker != "" {
		effects = append(effects, effect.WriteLocal{Path: s.Marker, Content: s.MarkerContent})
		also += "; record it as new in " + s.Marker
	}
	if s.KnownHosts == "" {
		return effects, also, nil
	}
	stale, err := remote.KnowsHost(s.KnownHosts, s.Addr)
	if err != nil {
		return nil, "", err
	}
	if stale {
		effects = append(effects, effect.ForgetHostKey{File: s.KnownHosts, Addr: s.Addr})
		also += "; forget the host key an earlier VM left at " + s.Addr
	}
	return effects, also, nil
}

// createAPI is create-vm's plan through the API: the laptop's records as
// over SSH, then one POST /nodes/{node}/qemu, its task waited for.
func (s *CreateVM) createAPI() (step.Plan, error) {
	n := s.N
	effects, also, err := s.laptopRecords()
	if err != nil {
		return step.Plan{}, err
	}
	create := effect.Call{Method: "POST", Path: "/nodes/" + url.PathEscape(n.Spec.Node) + "/qemu", Params: s.createParams()}
	effects = append(effects, create)
	summary := fmt.Sprintf("create VM %s (%s) from %s", n.VMID(), n.Spec.Name, n.ImageVolID()) + also
	var lines []string
	for _, k := range sortedKeys(create.Params) {
		v := create.Params.Get(k)
		if k == "sshkeys" {
			v = "(the user's public key, URI-escaped)"
		}
		lines = append(lines, k+"="+v)
	}
	return step.Plan{Changes: []step.Change{{Target: "VM " + n.VMID(), Action: step.Create, Summary: summary,
		Diff: &step.Diff{Path: "POST " + create.Path, After: strings.Join(lines, "\n") + "\n"}, Effects: effects}}}, nil
}

func sortedKeys(v url.Values) []string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Finish implements step.Finisher: the VM is read back. That it is new
// (its host key is learned on first contact) is the record the plan
// wrote before qm create, not a note in memory.
func (s *CreateVM) Finish(ctx context.Context, out []remote.Result, err error) error {
	n := s.N
	if err != nil {
		return fmt.Errorf("create VM %s: %w", n.VMID(), err)
	}
	return n.Gather(ctx)
}

// GrowDisk grows scsi0 to diskGiB; it never shrinks.
type GrowDisk struct{ N *Node }

var _ step.Finisher = (*GrowDisk)(nil)

// ID implements step.Step.
func (s *GrowDisk) ID() string { return "grow-disk" }

// Host implements step.Step.
func (s *GrowDisk) Host() string { return s.N.Name() }

func (s *GrowDisk) want() int64 { return int64(s.N.Spec.DiskGiB) << 30 }

// Check implements step.Step.
func (s *GrowDisk) Check(ctx context.Context) (step.Plan, error) {
	n := s.N
	gib := n.Spec.DiskGiB
	if !n.Facts.VMExists {
		return step.Plan{Changes: []step.Change{{Target: "VM " + n.VMID() + " scsi0", Action: step.Update,
			Summary: fmt.Sprintf("grow scsi0 to %dG once the VM exists", gib)}}}, nil
	}
	cur, ok := n.DiskBytes()
	if !ok {
		return step.Plan{}, fmt.Errorf("VM %s: cannot read scsi0's size from %q", n.VMID(), n.Facts.Config["scsi0"])
	}
	switch {
	case cur == s.want():
		return step.Plan{Note: fmt.Sprintf("scsi0 is %dG", gib)}, nil
	case cur > s.want():
		return step.Plan{}, fmt.Errorf("VM %s's disk is %s, larger than diskGiB %d; disks are never shrunk: set spec.vm.diskGiB to %d or more",
			n.VMID(), human(cur), gib, (cur+(1<<30)-1)>>30)
	}
	size := fmt.Sprintf("%dG", gib)
	return step.Plan{Changes: []step.Change{{Target: "VM " + n.VMID() + " scsi0", Action: step.Update,
		Summary: fmt.Sprintf("grow scsi0 from %s to %dG", human(cur), gib),
		Effects: []effect.Effect{n.do(remote.Command("qm", "resize", n.VMID(), "scsi0", size),
			"PUT", n.vmPath()+"/resize", url.Values{"disk": {"scsi0"}, "size": {size}})}}}}, nil
}

func human(b int64) string {
	if b%(1<<30) == 0 {
		return fmt.Sprintf("%dG", b>>30)
	}
	return fmt.Sprintf("%dM", b>>20)
}

// Finish implements step.Finisher. qm resize exits 0 even when its worker
// fails (docs/upstream.md §1.3), so the result is read back from qm config.
func (s *GrowDisk) Finish(ctx context.Context, out []remote.Result, err error) error {
	n := s.N
	if err != nil {
		return fmt.Errorf("grow disk of VM %s: %w", n.VMID(), err)
	}
	if err := n.Gather(ctx); err != nil {
		return err
	}
	if cur, _ := n.DiskBytes(); cur != s.want() {
		why := ""
		if len(out) > 0 {
			why = ": " + strings.TrimSpace(string(out[len(out)-1].Stderr))
		}
		return fmt.Errorf("grow disk of VM %s: size is still %s%s", n.VMID(), human(cur), why)
	}
	return nil
}

// StartVM starts the VM when it is stopped.
type StartVM struct{ N *Node }

var _ step.Finisher = (*StartVM)(nil)

// ID implements step.Step.
func (s *StartVM) ID() string { return "start-vm" }

// Host implements step.Step.
func (s *StartVM) Host() string { return s.N.Name() }

// Check implements step.Step.
func (s *StartVM) Check(ctx context.Context) (step.Plan, error) {
	if s.N.Facts.Running {
		return step.Plan{Note: "VM " + s.N.VMID() + " is running"}, nil
	}
	return step.Plan{Changes: []step.Change{{Target: "VM " + s.N.VMID(), Action: step.Run, Summary: fmt.Sprintf("start VM %s (%s)", s.N.VMID(), s.N.Spec.Name),
		Effects: []effect.Effect{s.N.do(remote.Command("qm", "start", s.N.VMID()), "POST", s.N.vmPath()+"/status/start", nil)}}}}, nil
}

// Finish implements step.Finisher: the VM is read back, booting (its
// uptime says since when).
func (s *StartVM) Finish(ctx context.Context, out []remote.Result, err error) error {
	if err != nil {
		return fmt.Errorf("start VM %s: %w", s.N.VMID(), err)
	}
	return s.N.Gather(ctx)
}

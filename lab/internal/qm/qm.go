// Package qm simulates Proxmox VE's `qm`, `pvesh get /cluster/nextid` and
// `pvesh get /cluster/resources --type vm`
// over the real file layout: /etc/pve/nodes/<node>/qemu-server/<vmid>.conf
// in upstream's "key: value" format. Outputs, error texts and exit codes
// follow qemu-server 9.2.6 (docs/upstream.md §1 names each source).
//
// What a real node does with QEMU (run the guest) is delegated to a
// Backend: in the lab, the daemon that boots a VM's host namespace.
package qm

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Backend runs guests.
type Backend interface {
	Boot(vmid int, conf Config) error
	Halt(vmid int) error
	Running(vmid int) (bool, error)
	// Uptime is how long the running VM's QEMU has run.
	Uptime(vmid int) (time.Duration, error)
	// GuestUp reports whether the guest booted (and would answer ACPI).
	GuestUp(vmid int) (bool, error)
	// Destroyed tells the backend to drop the guest's disk contents.
	Destroyed(vmid int) error
	// GuestAgent reports whether the guest's qemu-guest-agent answers.
	GuestAgent(vmid int) (bool, error)
	// GuestExec runs argv in the guest through the agent.
	GuestExec(vmid int, argv []string) (stdout, stderr string, code int, err error)
}

// Node is one simulated Proxmox node.
type Node struct {
	Name string
	// Root is "/" on a lab host; tests point it at a temporary directory.
	Root    string
	Backend Backend
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	// MAC returns a random MAC's last three bytes; tests pin it.
	MAC func() [3]byte
	// Now is the unix time for meta ctime.
	Now func() int64
	// API says the command came through the REST API rather than qm's
	// command line: a value is what the API takes (sshkeys holds the
	// keys, URI-escaped, where qm takes a file).
	API bool
}

// Exit codes. A Perl die outside a worker exits with $! when set: reading a
// missing config leaves ENOENT (2). Failed tasks ($upid_exit) exit -1 = 255.
// Neither number has been observed on a real node (docs/upstream.md
// §1.0); tests of the
// tool assert only "non-zero".
const (
	exitNoConfig = 2
	exitDie      = 255
)

func (n *Node) confDir() string {
	return filepath.Join(n.Root, "etc/pve/nodes", n.Name, "qemu-server")
}

// owner is the node of the cluster whose config holds vmid: /etc/pve is
// the cluster's shared filesystem (pmxcfs), where a VMID exists once
// (pve-cluster's check_vmid_unused reads the cluster-wide vmlist).
func (n *Node) owner(vmid int) (string, bool) {
	matches, _ := filepath.Glob(filepath.Join(n.Root, "etc/pve/nodes", "*", "qemu-server", strconv.Itoa(vmid)+".conf"))
	if len(matches) == 0 {
		return "", false
	}
	return filepath.Base(filepath.Dir(filepath.Dir(matches[0]))), true
}

// clusterVMs are the VMIDs of every node of the cluster, each with the
// node whose config holds it.
func (n *Node) clusterVMs() map[int]string {
	vms := map[int]string{}
	matches, _ := filepath.Glob(filepath.Join(n.Root, "etc/pve/nodes", "*", "qemu-server", "*.conf"))
	for _, m := range matches {
		if id, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(m), ".conf")); err == nil {
			vms[id] = filepath.Base(filepath.Dir(filepath.Dir(m)))
		}
	}
	return vms
}

func (n *Node) confPath(vmid int) string {
	return filepath.Join(n.confDir(), strconv.Itoa(vmid)+".conf")
}

// relConf is the path as upstream's error shows it, relative to /etc/pve.
func (n *Node) relConf(vmid int) string {
	return fmt.Sprintf("nodes/%s/qemu-server/%d.conf", n.Name, vmid)
}

// Config is a VM's configuration: key -> value.
type Config map[string]string

func (n *Node) load(vmid int) (Config, error) {
	b, err := os.ReadFile(n.confPath(vmid))
	if err != nil {
		return nil, fmt.Errorf("Configuration file '%s' does not exist", n.relConf(vmid))
	}
	c := Config{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "[") { // snapshot sections: none here
			break
		}
		k, v, ok := strings.Cut(line, ": ")
		if ok {
			c[k] = v
		}
	}
	return c, nil
}

// write stores c sorted by key, as PVE's config writer does.
func (n *Node) write(vmid int, c Config) error {
	if err := os.MkdirAll(n.confDir(), 0o755); err != nil {
		return err
	}
	var b strings.Builder
	if d, ok := c["description"]; ok {
		for _, l := range strings.Split(d, "\n") {
			b.WriteString("#" + l + "\n")
		}
	}
	for _, k := range sortedKeys(c) {
		if k == "description" {
			continue
		}
		fmt.Fprintf(&b, "%s: %s\n", k, c[k])
	}
	tmp := n.confPath(vmid) + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, n.confPath(vmid))
}

func sortedKeys[V any](c map[string]V) []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys) // Perl sort: byte order, like Go's
	return keys
}

func (n *Node) vmids() []int {
	entries, _ := os.ReadDir(n.confDir())
	var ids []int
	for _, e := range entries {
		if id, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".conf")); err == nil && strings.HasSuffix(e.Name(), ".conf") {
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	return ids
}

func (n *Node) outf(format string, args ...any) { fmt.Fprintf(n.Stdout, format, args...) }
func (n *Node) errf(format string, args ...any) { fmt.Fprintf(n.Stderr, format, args...) }

// die prints msg to stderr and returns code, as Perl's die does.
func (n *Node) die(code int, format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	if !strings.HasSuffix(msg, "\n") {
		msg += "\n"
	}
	n.errf("%s", msg)
	return code
}

// usage is a parameter error: message, then the command's synopsis.
func (n *Node) usage(cmd, msg string) int {
	n.errf("%s\n400 unable to parse option\nqm %s <vmid> [OPTIONS]\n", msg, cmd)
	return exitDie
}

func parseVMID(s string) (int, bool) {
	id, err := strconv.Atoi(s)
	return id, err == nil && id >= 100 && id <= 999999999
}

// QM runs `qm args...` and returns the exit code.
func (n *Node) QM(args []string) int {
	if len(args) == 0 {
		n.errf("ERROR: no command specified\n")
		return exitDie
	}
	cmd, rest := args[0], args[1:]
	if cmd == "disk" && len(rest) > 0 && rest[0] == "resize" {
		cmd, rest = "resize", rest[1:]
	}
	if cmd == "list" {
		return n.list()
	}
	if cmd == "guest" {
		return n.guest(rest)
	}
	if len(rest) == 0 {
		n.errf("400 not enough arguments\nqm %s <vmid> [OPTIONS]\n", cmd)
		return exitDie
	}
	vmid, ok := parseVMID(rest[0])
	if !ok {
		n.errf("400 Parameter verification failed.\nvmid: invalid format - value must be an integer from 100 to 999999999\n")
		return exitDie
	}
	rest = rest[1:]
	switch cmd {
	case "create":
		return n.create(vmid, rest)
	case "set":
		return n.set(vmid, rest)
	case "config":
		return n.config(vmid, rest)
	case "status":
		return n.status(vmid, rest)
	case "start":
		return n.start(vmid)
	case "reset":
		return n.reset(vmid)
	case "reboot":
		return n.reboot(vmid, rest)
	case "stop", "shutdown":
		return n.stop(vmid)
	case "destroy":
		return n.destroy(vmid)
	case "resize":
		return n.resize(vmid, rest)
	}
	n.errf("unknown command 'qm %s'\n", cmd)
	return exitDie
}

func (n *Node) config(vmid int, args []string) int {
	c, err := n.load(vmid)
	if err != nil {
		return n.die(exitNoConfig, "%v", err)
	}
	for _, k := range sortedKeys(c) {
		if k == "digest" {
			continue
		}
		n.outf("%s: %s\n", k, c[k])
	}
	return 0
}

func (n *Node) running(vmid int) bool {
	ok, err := n.Backend.Running(vmid)
	return err == nil && ok
}

func (n *Node) status(vmid int, args []string) int {
	c, err := n.load(vmid)
	if err != nil {
		return n.die(exitNoConfig, "%v", err)
	}
	st := "stopped"
	if n.running(vmid) {
		st = "running"
	}
	if len(args) == 0 || (args[0] != "--verbose" && args[0] != "-verbose") {
		n.outf("status: %s\n", st)
		return 0
	}
	// vmstatus's keys, sorted, as print_recursive_hash prints them
	// (cpu and relcpu skipped).
	kv, err := n.VMStatus(vmid, c)
	if err != nil {
		return n.die(exitDie, "%v", err)
	}
	for _, k := range sortedKeys(kv) {
		n.outf("%s: %v\n", k, kv[k])
	}
	return 0
}

// VMStatus is the lab's subset of qemu-server's vmstatus for a VM of
// config c: cpus, maxmem, name, status, uptime (seconds since QEMU
// started, 0 when stopped), vmid, and for a running VM its pid and
// qmpstatus. `qm status --verbose` prints it; the API's status/current
// answers it.
func (n *Node) VMStatus(vmid int, c Config) (map[string]any, error) {
	cores, _ := strconv.Atoi(c["cores"])
	mem, _ := strconv.Atoi(c["memory"])
	kv := map[string]any{"cpus": max(cores, 1), "maxmem": int64(max(mem, 512)) << 20,
		"name": vmName(c, vmid), "status": "stopped", "uptime": 0, "vmid": vmid}
	if n.running(vmid) {
		up, err := n.Backend.Uptime(vmid)
		if err != nil {
			return nil, err
		}
		kv["status"], kv["pid"], kv["qmpstatus"], kv["uptime"] = "running", 100000+vmid, "running", int(up.Seconds())
	}
	return kv, nil
}

// reset is a hard reset (QMP system_reset): the guest boots again from
// its disk, hung or not. Only a running VM can be reset.
func (n *Node) reset(vmid int) int {
	c, err := n.load(vmid)
	if err != nil {
		return n.die(exitNoConfig, "%v", err)
	}
	if !n.running(vmid) {
		return n.die(exitDie, "VM %d not running", vmid)
	}
	return n.powerCycle(vmid, c)
}

// powerCycle stops the guest and boots it again from its disk.
func (n *Node) powerCycle(vmid int, c Config) int {
	if err := n.Backend.Halt(vmid); err != nil {
		return n.die(exitDie, "%v", err)
	}
	if err := n.Backend.Boot(vmid, c); err != nil {
		return n.die(exitDie, "%v", err)
	}
	return 0
}

// reboot asks the guest to shut down (ACPI, or the guest agent) and starts
// it again. A guest that never came up does not answer: upstream waits
// --timeout seconds (60 by default) and fails; the lab fails at once with
// upstream's message rather than hold the caller.
func (n *Node) reboot(vmid int, args []string) int {
	c, err := n.load(vmid)
	if err != nil {
		return n.die(exitNoConfig, "%v", err)
	}
	if !n.running(vmid) {
		return n.die(exitDie, "VM %d not running", vmid)
	}
	if up, err := n.Backend.GuestUp(vmid); err != nil || !up {
		return n.die(exitDie, "VM quit/powerdown failed - got timeout")
	}
	return n.powerCycle(vmid, c)
}

func (n *Node) start(vmid int) int {
	c, err := n.load(vmid)
	if err != nil {
		return n.die(exitNoConfig, "%v", err)
	}
	if n.running(vmid) {
		return n.die(exitDie, "VM %d already running", vmid)
	}
	if hasCloudInit(c) {
		n.outf("generating cloud-init ISO\n")
	}
	if err := n.Backend.Boot(vmid, c); err != nil {
		return n.die(exitDie, "start failed: %v", err)
	}
	return 0
}

func hasCloudInit(c Config) bool {
	for k, v := range c {
		if isDrive(k) && strings.Contains(v, "cloudinit") {
			return true
		}
	}
	return false
}

func (n *Node) stop(vmid int) int {
	if _, err := n.load(vmid); err != nil {
		return n.die(exitNoConfig, "%v", err)
	}
	if !n.running(vmid) {
		return 0 // UNVERIFIED: stopping a stopped VM is taken as a no-op
	}
	if err := n.Backend.Halt(vmid); err != nil {
		return n.die(exitDie, "stop failed: %v", err)
	}
	return 0
}

func (n *Node) destroy(vmid int) int {
	c, err := n.load(vmid)
	if err != nil {
		return n.die(exitNoConfig, "%v", err)
	}
	if n.running(vmid) {
		return n.die(exitDie, "VM %d is running - destroy failed", vmid)
	}
	for k, v := range c {
		if isDrive(k) {
			n.removeVolume(volume(v))
		}
	}
	if err := os.Remove(n.confPath(vmid)); err != nil {
		return n.die(exitDie, "%v", err)
	}
	_ = n.Backend.Destroyed(vmid)
	n.outf("  Logical volume \"vm-%d-disk-0\" successfully removed.\n", vmid)
	return 0
}

func (n *Node) list() int {
	ids := n.vmids()
	if len(ids) == 0 {
		return 0
	}
	n.outf("%10s %-20s %-10s %-10s %12s %-10s\n", "VMID", "NAME", "STATUS", "MEM(MB)", "BOOTDISK(GB)", "PID")
	for _, id := range ids {
		c, err := n.load(id)
		if err != nil {
			continue
		}
		name := vmName(c, id)
		st, pid := "stopped", "0"
		if n.running(id) {
			st, pid = "running", strconv.Itoa(100000+id)
		}
		mem := c["memory"]
		if mem == "" {
			mem = "2048"
		}
		n.outf("%10s %-20s %-10s %-10s %12.2f %-10s\n", strconv.Itoa(id), name, st, mem, float64(bootDiskSize(c))/(1<<30), pid)
	}
	return 0
}

// NextID answers `pvesh get /cluster/nextid [--vmid N]`.
func (n *Node) NextID(args []string) int {
	taken := n.clusterVMs()
	for i := 0; i < len(args); i++ {
		if args[i] == "--vmid" && i+1 < len(args) {
			id, _ := strconv.Atoi(args[i+1])
			if _, ok := taken[id]; ok {
				n.errf("400 Parameter verification failed.\nvmid: VM %d already exists\n", id)
				return exitDie
			}
			n.outf("%d\n", id)
			return 0
		}
	}
	for id := 100; id < 1000000; id++ {
		if _, ok := taken[id]; !ok {
			n.outf("%d\n", id)
			return 0
		}
	}
	n.errf("unable to get any free VMID in range [100, 1000000]\n")
	return exitDie
}

// vmName is a VM's name, or what Proxmox shows for a VM without one.
func vmName(c Config, vmid int) string {
	if c["name"] != "" {
		return c["name"]
	}
	return fmt.Sprintf("VM %d", vmid)
}

// clusterVM is one VM of `pvesh get /cluster/resources --type vm`: the
// API's entry for it (pve-manager PVE/API2/Cluster.pm, resources, with
// PVE/API2Tools.pm extract_vm_stats; tags since PVE 7.3), the lab's
// subset of its fields.
type clusterVM struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	VMID     int    `json:"vmid"`
	Name     string `json:"name"`
	Node     string `json:"node"`
	Status   string `json:"status"`
	Template int    `json:"template"`
	Tags     string `json:"tags,omitempty"`
	MaxCPU   int    `json:"maxcpu"`
	MaxMem   int64  `json:"maxmem"`
	MaxDisk  int64  `json:"maxdisk"`
	Uptime   int    `json:"uptime"`
}

// Resources answers `pvesh get /cluster/resources --type vm
// [--output-format json]`: every VM of the cluster, whichever node holds
// its config, in JSON (what the lab's callers ask for).
func (n *Node) Resources(args []string) int {
	var typ, format string
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--type":
			typ = args[i+1]
		case "--output-format":
			format = args[i+1]
		}
	}
	if typ != "vm" || format != "json" {
		n.errf("the lab answers /cluster/resources only with --type vm --output-format json\n")
		return exitDie
	}
	out := []clusterVM{}
	for id, node := range n.clusterVMs() {
		c, err := (&Node{Name: node, Root: n.Root}).load(id)
		if err != nil {
			continue
		}
		v := clusterVM{ID: fmt.Sprintf("qemu/%d", id), Type: "qemu", VMID: id, Name: vmName(c, id), Node: node, Status: "stopped", Tags: c["tags"]}
		if c["template"] == "1" {
			v.Template = 1
		}
		cores, _ := strconv.Atoi(c["cores"])
		mem, _ := strconv.Atoi(c["memory"])
		v.MaxCPU, v.MaxMem, v.MaxDisk = max(cores, 1), int64(max(mem, 512))<<20, bootDiskSize(c)
		if n.running(id) {
			v.Status = "running"
			if up, err := n.Backend.Uptime(id); err == nil {
				v.Uptime = int(up.Seconds())
			}
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].VMID < out[j].VMID })
	b, _ := json.Marshal(out)
	n.outf("%s\n", b)
	return 0
}

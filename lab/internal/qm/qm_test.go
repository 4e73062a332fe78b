package qm

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type fakeBackend struct {
	running map[int]bool
	agent   bool
	hung    bool // the guest never came up
}

func (f *fakeBackend) Boot(vmid int, c Config) error     { f.running[vmid] = true; return nil }
func (f *fakeBackend) Halt(vmid int) error               { f.running[vmid] = false; return nil }
func (f *fakeBackend) Running(vmid int) (bool, error)    { return f.running[vmid], nil }
func (f *fakeBackend) Destroyed(int) error               { return nil }
func (f *fakeBackend) Uptime(int) (time.Duration, error) { return 42 * time.Second, nil }
func (f *fakeBackend) GuestUp(vmid int) (bool, error)    { return f.running[vmid] && !f.hung, nil }
func (f *fakeBackend) GuestAgent(int) (bool, error)      { return f.agent, nil }
func (f *fakeBackend) GuestExec(_ int, argv []string) (string, string, int, error) {
	return strings.Join(argv, " ") + "\n", "", 0, nil
}

type node struct {
	*Node
	out, err bytes.Buffer
	be       *fakeBackend
}

func newNode(t *testing.T) *node {
	root := t.TempDir()
	n := &node{be: &fakeBackend{running: map[int]bool{}}}
	n.Node = &Node{Name: "pve", Root: root, Backend: n.be, Stdout: &n.out, Stderr: &n.err,
		MAC: func() [3]byte { return [3]byte{0x12, 0x34, 0x56} }, Now: func() int64 { return 1764669600 }}
	// A qcow2 header claiming 3.5 GiB, like Ubuntu's cloud image.
	img := make([]byte, 512)
	copy(img, "QFI\xfb")
	binary.BigEndian.PutUint32(img[4:], 3)
	binary.BigEndian.PutUint64(img[24:], 3584<<20)
	os.MkdirAll(filepath.Join(root, "var/lib/vz/template/iso"), 0o755)
	os.WriteFile(filepath.Join(root, "var/lib/vz/template/iso/noble.img"), img, 0o644)
	os.WriteFile(filepath.Join(root, "keys"), []byte("ssh-ed25519 AAAAC3Nz+/= user@host\n"), 0o644)
	return n
}

func (n *node) qm(args ...string) int {
	n.out.Reset()
	n.err.Reset()
	return n.QM(args)
}

func (n *node) createVM(t *testing.T) {
	t.Helper()
	code := n.qm("create", "110", "--name", "lab-mgmt", "--cores", "2", "--memory", "4096",
		"--net0", "virtio,bridge=vmbr0,tag=4", "--scsihw", "virtio-scsi-pci",
		"--scsi0", "local-lvm:0,import-from=/var/lib/vz/template/iso/noble.img",
		"--ide2", "local-lvm:cloudinit", "--boot", "order=scsi0", "--serial0", "socket", "--vga", "serial0",
		"--agent", "1", "--ciuser", "ubuntu", "--sshkeys", filepath.Join(n.Root, "keys"),
		"--ipconfig0", "ip=192.0.2.50/24,gw=192.0.2.1", "--nameserver", "192.0.2.1", "--tags", "mgmtctl")
	if code != 0 {
		t.Fatalf("create exit %d: %s", code, n.err.String())
	}
}

func TestCreateAndConfig(t *testing.T) {
	n := newNode(t)
	n.createVM(t)
	wantOut := `  Logical volume "vm-110-cloudinit" created.
ide2: successfully created disk 'local-lvm:vm-110-cloudinit,media=cdrom'
  Logical volume "vm-110-disk-0" created.
transferred 0.0 B of 3.50 GiB (0.00%)
transferred 3.50 GiB of 3.50 GiB (100.00%)
scsi0: successfully created disk 'local-lvm:vm-110-disk-0,size=3584M'
`
	if n.out.String() != wantOut {
		t.Errorf("create output:\n%s\nwant:\n%s", n.out.String(), wantOut)
	}
	if code := n.qm("config", "110"); code != 0 {
		t.Fatal(n.err.String())
	}
	cfg := n.out.String()
	for _, want := range []string{
		"agent: 1\nboot: order=scsi0\nciuser: ubuntu\ncores: 2\n",
		"ide2: local-lvm:vm-110-cloudinit,media=cdrom\n",
		"ipconfig0: ip=192.0.2.50/24,gw=192.0.2.1\n",
		"meta: creation-qemu=9.2.0,ctime=1764669600\n",
		"net0: virtio=BC:24:11:12:34:56,bridge=vmbr0,tag=4\n",
		"scsi0: local-lvm:vm-110-disk-0,size=3584M\nscsihw: virtio-scsi-pci\nserial0: socket\n",
		"sshkeys: ssh-ed25519%20AAAAC3Nz%2B%2F%3D%20user%40host%0A\n",
		"tags: mgmtctl\nvga: serial0\nvmgenid: ",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	// The .conf file is what upstream keeps under /etc/pve.
	b, err := os.ReadFile(filepath.Join(n.Root, "etc/pve/nodes/pve/qemu-server/110.conf"))
	if err != nil || !strings.HasPrefix(string(b), "agent: 1\n") {
		t.Errorf("conf file: %q %v", b, err)
	}
}

func TestErrors(t *testing.T) {
	n := newNode(t)
	tests := []struct {
		name     string
		args     []string
		code     int
		stderr   string
		prepared bool
	}{
		{"status of missing VM", []string{"status", "110"}, 2, "Configuration file 'nodes/pve/qemu-server/110.conf' does not exist\n", false},
		{"config of missing VM", []string{"config", "110"}, 2, "Configuration file 'nodes/pve/qemu-server/110.conf' does not exist\n", false},
		{"create existing", []string{"create", "110", "--name", "x"}, 255, "unable to create VM 110 - VM 110 already exists on node 'pve'\n", true},
		{"import-from needs :0", []string{"create", "111", "--scsi0", "local-lvm:8,import-from=/var/lib/vz/template/iso/noble.img"}, 255, "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>", false},
		{"import-from missing file", []string{"create", "111", "--scsi0", "local-lvm:0,import-from=/nope.img"}, 255, "could not get file size of /nope.img", false},
		{"unknown option", []string{"create", "111", "--bogus", "1"}, 255, "Unknown option: bogus\n400 unable to parse option\n", false},
		{"bad vlan tag", []string{"create", "111", "--net0", "virtio,bridge=vmbr0,tag=5000"}, 255, "net0.tag: value must have a minimum value of 1", false},
		{"start running", []string{"start", "110"}, 255, "VM 110 already running\n", true},
		{"destroy running", []string{"destroy", "110"}, 255, "VM 110 is running - destroy failed\n", true},
		{"shrink exits 0", []string{"resize", "110", "scsi0", "1G"}, 0, "shrinking disks is not supported\n", true},
		{"resize cdrom", []string{"resize", "110", "ide2", "+1G"}, 0, "you can't resize a cdrom\n", true},
		{"resize missing disk", []string{"resize", "110", "scsi1", "30G"}, 0, "disk 'scsi1' does not exist\n", true},
		{"bad vmid", []string{"status", "99"}, 255, "vmid: invalid format", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t)
			if tt.prepared {
				n.createVM(t)
				n.be.running[110] = true
			}
			code := n.qm(tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, n.err.String())
			}
			if !strings.Contains(n.err.String(), tt.stderr) {
				t.Errorf("stderr %q lacks %q", n.err.String(), tt.stderr)
			}
			if _, err := os.Stat(filepath.Join(n.Root, "etc/pve/nodes/pve/qemu-server/111.conf")); err == nil {
				t.Errorf("a failed create left a config")
			}
		})
	}
	_ = n
}

func TestLifecycle(t *testing.T) {
	n := newNode(t)
	n.createVM(t)
	if n.qm("status", "110"); n.out.String() != "status: stopped\n" {
		t.Errorf("status = %q", n.out.String())
	}
	if code := n.qm("resize", "110", "scsi0", "30G"); code != 0 || n.err.Len() != 0 {
		t.Fatalf("resize: %d %s", code, n.err.String())
	}
	if !strings.Contains(n.out.String(), "changed from 3.50 GiB (896 extents) to 30.00 GiB (7680 extents)") {
		t.Errorf("resize output %q", n.out.String())
	}
	n.qm("config", "110")
	if !strings.Contains(n.out.String(), "scsi0: local-lvm:vm-110-disk-0,size=30G\n") {
		t.Errorf("size not tracked:\n%s", n.out.String())
	}
	if code := n.qm("resize", "110", "scsi0", "30G"); code != 0 || n.out.Len()+n.err.Len() != 0 {
		t.Errorf("same size must be silent: %q %q", n.out.String(), n.err.String())
	}
	if code := n.qm("start", "110"); code != 0 || n.out.String() != "generating cloud-init ISO\n" {
		t.Errorf("start: %d %q", code, n.out.String())
	}
	if n.qm("status", "110"); n.out.String() != "status: running\n" {
		t.Errorf("status = %q", n.out.String())
	}
	n.qm("status", "110", "--verbose")
	if want := "cpus: 2\nmaxmem: 4294967296\nname: lab-mgmt\npid: 100110\nqmpstatus: running\nstatus: running\nuptime: 42\nvmid: 110\n"; n.out.String() != want {
		t.Errorf("status --verbose:\n%s", n.out.String())
	}
	// A hung guest: reboot needs it to answer ACPI and fails; reset
	// boots it again.
	n.be.hung = true
	if code := n.qm("reboot", "110"); code != 255 || n.err.String() != "VM quit/powerdown failed - got timeout\n" {
		t.Errorf("reboot of a hung guest: %d %q", code, n.err.String())
	}
	if code := n.qm("reset", "110"); code != 0 || !n.be.running[110] {
		t.Errorf("reset: %d %q", code, n.err.String())
	}
	n.be.hung = false
	if code := n.qm("reboot", "110"); code != 0 || !n.be.running[110] {
		t.Errorf("reboot: %d %q", code, n.err.String())
	}
	n.qm("list")
	want := "      VMID NAME                 STATUS     MEM(MB)    BOOTDISK(GB) PID       \n       110 lab-mgmt             running    4096              30.00 100110    \n"
	if n.out.String() != want {
		t.Errorf("list:\n%q\nwant\n%q", n.out.String(), want)
	}
	if code := n.qm("stop", "110"); code != 0 {
		t.Error("stop")
	}
	if code := n.qm("reset", "110"); code != 255 || n.err.String() != "VM 110 not running\n" {
		t.Errorf("reset of a stopped VM: %d %q", code, n.err.String())
	}
	if n.qm("status", "110", "--verbose"); !strings.Contains(n.out.String(), "status: stopped\nuptime: 0\n") || strings.Contains(n.out.String(), "pid") {
		t.Errorf("status --verbose of a stopped VM:\n%s", n.out.String())
	}
	if code := n.qm("destroy", "110"); code != 0 {
		t.Fatalf("destroy: %s", n.err.String())
	}
	if code := n.qm("status", "110"); code == 0 {
		t.Error("destroyed VM still has a config")
	}
	if n.qm("list"); n.out.Len() != 0 {
		t.Errorf("list with no VMs prints %q", n.out.String())
	}
}

func TestGuest(t *testing.T) {
	n := newNode(t)
	n.createVM(t)
	if code := n.qm("guest", "cmd", "110", "ping"); code == 0 || n.err.String() != "VM 110 is not running\n" {
		t.Errorf("stopped: %d %q", code, n.err.String())
	}
	n.be.running[110] = true
	if code := n.qm("guest", "cmd", "110", "ping"); code == 0 || n.err.String() != "QEMU guest agent is not running\n" {
		t.Errorf("no agent: %d %q", code, n.err.String())
	}
	n.be.agent = true
	if code := n.qm("guest", "cmd", "110", "network-get-interfaces"); code != 0 {
		t.Fatal(n.err.String())
	}
	if !strings.Contains(n.out.String(), "\"ip-address\" : \"192.0.2.50\"") || !strings.Contains(n.out.String(), "      \"hardware-address\" : \"bc:24:11:12:34:56\"") {
		t.Errorf("interfaces:\n%s", n.out.String())
	}
	if code := n.qm("guest", "exec", "110", "--", "cat", "/etc/ssh/ssh_host_ed25519_key.pub"); code != 0 {
		t.Fatal(n.err.String())
	}
	if !strings.Contains(n.out.String(), "\"exitcode\" : 0") || !strings.Contains(n.out.String(), "\"out-data\" : \"cat /etc/ssh/ssh_host_ed25519_key.pub\\n\"") {
		t.Errorf("exec:\n%s", n.out.String())
	}
	n.qm("set", "110", "--agent", "0")
	if code := n.qm("guest", "cmd", "110", "ping"); code == 0 || n.err.String() != "No QEMU guest agent configured\n" {
		t.Errorf("agent off: %d %q", code, n.err.String())
	}
}

func TestSetKeepsMAC(t *testing.T) {
	n := newNode(t)
	n.createVM(t)
	n.MAC = func() [3]byte { return [3]byte{0xaa, 0xbb, 0xcc} }
	n.qm("set", "110", "--net0", "virtio,bridge=vmbr1")
	n.qm("config", "110")
	if !strings.Contains(n.out.String(), "net0: virtio=BC:24:11:12:34:56,bridge=vmbr1\n") {
		t.Errorf("config:\n%s", n.out.String())
	}
}

func TestNextID(t *testing.T) {
	n := newNode(t)
	n.out.Reset()
	if n.NextID(nil); n.out.String() != "100\n" {
		t.Errorf("nextid = %q", n.out.String())
	}
	n.createVM(t)
	n.out.Reset()
	n.err.Reset()
	if code := n.NextID([]string{"--vmid", "110"}); code == 0 || !strings.Contains(n.err.String(), "VM 110 already exists") {
		t.Errorf("taken vmid: %d %q", code, n.err.String())
	}
}

func TestFormatSize(t *testing.T) {
	for in, want := range map[int64]string{3584 << 20: "3584M", 30 << 30: "30G", 4 << 20: "4M", 1536: "1536", 2 << 40: "2T", 1024: "1K"} {
		if got := FormatSize(in); got != want {
			t.Errorf("FormatSize(%d) = %s, want %s", in, got, want)
		}
	}
}

// TestClusterWideVMIDs: in a Proxmox cluster /etc/pve is shared; a VMID
// exists once: creating it on another node names the node that has it,
// nextid skips it, and qm on a node sees only that node's VMs (upstream's
// qm is node-local: the config path is the local node's).
func TestClusterWideVMIDs(t *testing.T) {
	n := newNode(t)
	n.createVM(t)
	other := &node{be: n.be}
	other.Node = &Node{Name: "pve2", Root: n.Root, Backend: n.be, Stdout: &other.out, Stderr: &other.err,
		MAC: n.MAC, Now: n.Now}
	if code := other.qm("create", "110", "--name", "x"); code != 255 || other.err.String() != "unable to create VM 110 - VM 110 already exists on node 'pve'\n" {
		t.Errorf("create on another node: %d %q", code, other.err.String())
	}
	if code := other.qm("config", "110"); code != 2 || other.err.String() != "Configuration file 'nodes/pve2/qemu-server/110.conf' does not exist\n" {
		t.Errorf("config on another node: %d %q", code, other.err.String())
	}
	if code := other.NextID(nil); code != 0 || other.out.String() != "100\n" {
		t.Errorf("nextid: %d %q", code, other.out.String())
	}
	other.out.Reset()
	other.err.Reset()
	if code := other.NextID([]string{"--vmid", "110"}); code != 255 || !strings.Contains(other.err.String(), "VM 110 already exists") {
		t.Errorf("nextid --vmid 110: %d %q", code, other.err.String())
	}
	if other.qm("list"); other.out.Len() != 0 {
		t.Errorf("qm list on another node: %q", other.out.String())
	}
}

// TestResources: `pvesh get /cluster/resources --type vm` lists every VM
// of the cluster, whichever node holds its config, with its node, status
// and tags, as the API's JSON.
func TestResources(t *testing.T) {
	n := newNode(t)
	n.createVM(t)
	n.be.running[110] = true
	other := filepath.Join(n.Root, "etc/pve/nodes/pve2/qemu-server")
	os.MkdirAll(other, 0o755)
	os.WriteFile(filepath.Join(other, "201.conf"), []byte("name: lab1-cp-x\ncores: 2\nmemory: 2048\ntags: ip_net0_192.0.2.101\n"), 0o644)
	n.out.Reset()
	if code := n.Resources([]string{"--type", "vm", "--output-format", "json"}); code != 0 {
		t.Fatalf("exit %d: %s", code, n.err.String())
	}
	want := `[{"id":"qemu/110","type":"qemu","vmid":110,"name":"lab-mgmt","node":"pve","status":"running","template":0,"tags":"mgmtctl","maxcpu":2,"maxmem":4294967296,"maxdisk":3758096384,"uptime":42},` +
		`{"id":"qemu/201","type":"qemu","vmid":201,"name":"lab1-cp-x","node":"pve2","status":"stopped","template":0,"tags":"ip_net0_192.0.2.101","maxcpu":2,"maxmem":2147483648,"maxdisk":0,"uptime":0}]` + "\n"
	if n.out.String() != want {
		t.Errorf("got  %s\nwant %s", n.out.String(), want)
	}
	if code := n.Resources([]string{"--type", "node"}); code == 0 {
		t.Error("a type the lab does not answer succeeded")
	}
}

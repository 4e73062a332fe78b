package lab

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mgmtctl/mgmtctl/lab/internal/fixtures"
	"github.com/mgmtctl/mgmtctl/lab/internal/host"
	"github.com/mgmtctl/mgmtctl/lab/internal/mirror"
	"github.com/mgmtctl/mgmtctl/lab/internal/pki"
)

// Image is the lab's cloud image: where the real one lives, so mgmt.yaml
// keeps upstream's URL.
const (
	ImageHost = "cloud-images.ubuntu.com"
	ImagePath = "/noble/20260926/noble-server-cloudimg-amd64.img"
	// ImageVirtualSize is the real noble image's virtual size (3.5 GiB).
	ImageVirtualSize = 3584 << 20
)

// TokenID is the lab's Proxmox API token.
const TokenID = "capmox@pve!capi"

// MgmtctlTokenID is mgmtctl's own token in a lab in api access (UseAPI).
const MgmtctlTokenID = "mgmtctl@pve!vm"

// Up builds the lab and returns when it is ready. It is idempotent: a lab
// that is up is left as it is.
//
// Upstream's files (fixtures.Lay) go to crds/ and providers/: the lab's k3s
// applies helm-controller's CRDs from there, as k3s applies the ones it
// embeds, and the mirror builds the providers' releases from them.
func (l *Lab) Up(out io.Writer) error {
	if l.daemonAlive() {
		fmt.Fprintf(out, "lab already up in %s\n", l.Dir)
		return nil
	}
	// Leftovers of a crashed lab go first.
	if err := l.cleanup(); err != nil {
		return err
	}
	for _, d := range []string{"bin", "hosts", "vms", "faults", "laptop/home/.ssh", "pki"} {
		if err := os.MkdirAll(l.path(d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(l.marker(), []byte(l.Net.Prefix+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(l.path("nodes"), []byte(strconv.Itoa(max(l.NodeCount, 1))+"\n"), 0o644); err != nil {
		return err
	}
	nodes := l.Nodes()
	if err := copySelf(l.Binary()); err != nil {
		return err
	}
	if err := l.copyK3s(); err != nil {
		return err
	}
	if err := fixtures.Lay(l.Dir); err != nil {
		return fmt.Errorf("lay out upstream's CRDs and release files: %w", err)
	}
	ca, err := pki.LoadOrCreate(l.path("pki"))
	if err != nil {
		return err
	}
	if err := l.issue(ca, "mirror", MirrorNames, []net.IP{net.ParseIP(MirrorAddr)}); err != nil {
		return err
	}
	for _, n := range nodes {
		if err := l.issue(ca, n.Name, []string{n.Name}, []net.IP{net.ParseIP(n.Addr)}); err != nil {
			return err
		}
	}
	key := l.path("laptop/home/.ssh/id_ed25519")
	if !exists(key) {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "laptop@lab", "-f", key).CombinedOutput(); err != nil {
			return fmt.Errorf("ssh-keygen: %v: %s", err, out)
		}
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		return err
	}
	sum, err := l.writeImage()
	if err != nil {
		return err
	}
	if err := mirror.WriteCatalog(l.path("mirror"), l.path("crds"), l.path("providers")); err != nil {
		return fmt.Errorf("lay out the chart repositories and provider releases: %w", err)
	}
	if err := l.writeCABundle(ca.CertPEM); err != nil {
		return err
	}
	if err := l.writeLaptopHosts(); err != nil {
		return err
	}
	if err := l.writeS3Credentials(); err != nil {
		return err
	}
	if err := l.writeHostSpecs(string(pub), string(ca.CertPEM)); err != nil {
		return err
	}
	// A lab stopped (or copied) keeps its files; the S3's ready file is
	// its running gateway's to write again.
	_ = os.Remove(l.S3Ready())
	if err := l.startDaemon(); err != nil {
		return err
	}
	var known strings.Builder
	for _, n := range nodes {
		key, err := os.ReadFile(l.HostDisk(n.Name) + "/ssh_host_ed25519_key.pub")
		if err != nil {
			return err
		}
		f := strings.Fields(string(key))
		fmt.Fprintf(&known, "%s %s %s\n", n.Addr, f[0], f[1])
	}
	if err := os.WriteFile(l.path("laptop/home/.ssh/known_hosts"), []byte(known.String()), 0o644); err != nil {
		return err
	}
	if err := l.writeConfig(sum); err != nil {
		return err
	}
	fmt.Fprintf(out, "lab up in %s (namespaces %s-*)\n", l.Dir, l.Net.Prefix)
	for _, n := range nodes {
		fmt.Fprintf(out, "  Proxmox node %q at %s (root by key)\n", n.Name, n.Addr)
	}
	fmt.Fprintf(out, "  laptop %s, mirror %s\n", LaptopAddr, MirrorAddr)
	fmt.Fprintf(out, "  config: %s\n  run:    labsim exec --dir %s -- mgmtctl apply -c %s\n", l.ConfigPath(), l.Dir, l.ConfigPath())
	if len(l.Nodes()) >= 3 {
		fmt.Fprintf(out, "  three servers, one per node, API at %s: labsim exec --dir %s -- mgmtctl apply -c %s\n", VIPAddr, l.Dir, l.HAConfigPath())
	}
	return nil
}

// copyK3s brings the k3s simulator (built beside labsim) into the lab,
// for the mirror to release, and upstream's builds the lab's kubelet runs
// that are there already. It records where they are built (BuildsFile):
// the lab's daemon brings in each one still being built once it is there
// (watchBuilds), as a kubelet pulls an image once it is pushed.
func (l *Lab) copyK3s() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	builds := filepath.Dir(self)
	src := filepath.Join(builds, "k3s")
	if _, err := os.Stat(src); err != nil {
		return fmt.Errorf("the lab's k3s simulator is not beside labsim (%s): build both with make build", src)
	}
	if err := linkOrCopy(src, l.K3sBinary()); err != nil {
		return err
	}
	if _, err := l.syncBuilds(builds, true); err != nil {
		return err
	}
	return os.WriteFile(l.path(BuildsFile), []byte(builds+"\n"), 0o644)
}

func linkOrCopy(src, dst string) error {
	_ = os.Remove(dst)
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	// A link that names a build (cert-manager-<component>-<version>) is
	// made again: its target is relative, beside it.
	if target, err := os.Readlink(src); err == nil {
		return os.Symlink(target, dst)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

func copySelf(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if same(self, dst) {
		return nil
	}
	b, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

func same(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

func (l *Lab) issue(ca *pki.CA, name string, names []string, ips []net.IP) error {
	if exists(l.path("pki", name+".crt")) {
		return nil
	}
	c, k, err := ca.Issue(name, names, ips)
	if err != nil {
		return err
	}
	if err := os.WriteFile(l.path("pki", name+".crt"), c, 0o644); err != nil {
		return err
	}
	return os.WriteFile(l.path("pki", name+".key"), k, 0o600)
}

// writeImage makes a small stand-in for the cloud image: a qcow2 header
// with the real image's virtual size, then random bytes (so each lab's
// sha256 is its own), and upstream's SHA256SUMS beside it.
func (l *Lab) writeImage() (string, error) {
	p := l.path("mirror", ImageHost, ImagePath)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		b = make([]byte, 64<<10)
		_, _ = rand.Read(b[512:])
		for i := 0; i < 512; i++ {
			b[i] = 0
		}
		copy(b, "QFI\xfb")
		binary.BigEndian.PutUint32(b[4:], 3)
		binary.BigEndian.PutUint64(b[24:], ImageVirtualSize)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return "", err
		}
	}
	s := sha256.Sum256(b)
	sum := hex.EncodeToString(s[:])
	line := fmt.Sprintf("%s *%s\n", sum, filepath.Base(p))
	return sum, os.WriteFile(filepath.Join(filepath.Dir(p), "SHA256SUMS"), []byte(line), 0o644)
}

func (l *Lab) writeHostSpecs(laptopKey, caPEM string) error {
	nodes := l.Nodes()
	hosts := map[string]string{}
	for _, n := range nodes {
		hosts[n.Name] = n.Addr
	}
	for _, n := range MirrorNames {
		hosts[n] = MirrorAddr
	}
	labJSON, _ := json.Marshal(map[string]string{"dir": l.Dir, "node": nodes[0].Name})
	var specs []*host.Spec
	for _, n := range nodes {
		nodeJSON, _ := json.Marshal(map[string]string{"dir": l.Dir, "node": n.Name})
		specs = append(specs, &host.Spec{
			Name: n.Name, Hostname: n.Name, Addr: n.Addr, Disk: l.HostDisk(n.Name), LabDir: l.Dir,
			Overlays: []string{"/etc", "/root", "/var", "/usr/local", "/home"},
			Users:    []host.User{{Name: "root", AuthorizedKeys: laptopKey}}, RootLogin: true,
			Hosts: hosts, CACert: caPEM,
			Files: map[string]host.File{
				"/etc/labsim/lab.json":    {Content: string(nodeJSON) + "\n", Mode: 0o644},
				"/etc/network/interfaces": {Content: networkInterfaces(n.Addr), Mode: 0o644},
			},
			// pmxcfs: every node sees the same /etc/pve.
			Binds:      map[string]string{"/etc/pve": l.Pmxcfs()},
			Dirs:       []string{"/var/lib/vz/template/iso", "/etc/pve/nodes/" + n.Name + "/qemu-server"},
			Links:      map[string]string{"/usr/local/sbin/qm": host.SimBinary, "/usr/local/sbin/pvesh": host.SimBinary, "/usr/local/sbin/pveum": host.SimBinary, "/usr/local/sbin/pveversion": host.SimBinary},
			HostKeyOut: l.HostDisk(n.Name) + "/ssh_host_ed25519_key.pub",
			Role:       "pve",
		})
	}
	specs = append(specs,
		&host.Spec{
			Name: "mirror", Hostname: "mirror", Addr: MirrorAddr, Disk: l.HostDisk("mirror"), LabDir: l.Dir,
			Overlays: []string{"/etc", "/root", "/var"}, Hosts: hosts, CACert: caPEM, Role: "mirror",
			Files: map[string]host.File{"/etc/labsim/lab.json": {Content: string(labJSON) + "\n", Mode: 0o644}},
		},
	)
	for _, s := range specs {
		if err := os.MkdirAll(s.Disk, 0o755); err != nil {
			return err
		}
		b, _ := json.MarshalIndent(s, "", "  ")
		if err := os.WriteFile(s.Disk+"/spec.json", b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// networkInterfaces is a node's /etc/network/interfaces as the Proxmox VE
// installer writes it (vmbr0 over the NIC, the node's address on it),
// with vmbr0 VLAN-aware (the lab's VMs are on VLAN 4): what pve-manager's
// network API reads.
func networkInterfaces(addr string) string {
	return `auto lo
iface lo inet loopback

iface eno1 inet manual

auto vmbr0
iface vmbr0 inet static
	address ` + addr + `/24
	gateway 192.0.2.1
	bridge-ports eno1
	bridge-stp off
	bridge-fd 0
	bridge-vlan-aware yes
	bridge-vids 2-4094

source /etc/network/interfaces.d/*
`
}

// startDaemon runs `labsim daemon` detached from this process, so the lab
// outlives it, and waits for its READY (or FAILED) line.
func (l *Lab) startDaemon() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(l.path("daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(l.Binary(), "daemon", "--dir", l.Dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	w.Close()
	done := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		done <- strings.TrimSpace(line)
	}()
	var line string
	select {
	case line = <-done:
	case <-time.After(2 * time.Minute):
		line = "FAILED no answer in 2 minutes"
	}
	r.Close()
	_ = cmd.Process.Release()
	if line != "READY" {
		b, _ := os.ReadFile(l.path("daemon.log"))
		return fmt.Errorf("lab did not come up: %s\n%s", strings.TrimPrefix(line, "FAILED "), tail(string(b)))
	}
	return nil
}

func (l *Lab) daemonAlive() bool {
	if !exists(l.ControlSocket()) {
		return false
	}
	_, err := Call(l.ControlSocket(), Request{Op: "ping"}, 5*time.Second)
	return err == nil
}

// writeConfig writes the mgmt.yaml and secrets.yaml a user runs mgmtctl
// with: the real upstream URLs, the lab's addresses and image sum.
func (l *Lab) writeConfig(imageSHA string) error {
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	secret[6] = secret[6]&0x0f | 0x40
	secret[8] = secret[8]&0x3f | 0x80
	s := hex.EncodeToString(secret)
	uuid := s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
	if !exists(l.SecretsPath()) {
		// The node's side of the token (what `pveum user token add` made)
		// and the user's copy of its secret.
		if err := os.WriteFile(l.TokenPath(), []byte(TokenID+" "+uuid+"\n"), 0o600); err != nil {
			return err
		}
		// Its user and ACL, as CAPMOX's quick start makes them (a user,
		// a token without privilege separation) with PVEAdmin on /: a
		// user who skips least privilege. `mgmtctl proxmox role` makes a
		// least-privileged one (TestProxmoxRole).
		if err := os.MkdirAll(l.Pmxcfs(), 0o755); err != nil {
			return err
		}
		user, _, _ := strings.Cut(TokenID, "!")
		userCfg := fmt.Sprintf("user:%s:1:0::::::\ntoken:%s:0:0::\n\n\n\n\nacl:1:/:%s:PVEAdmin:\n", user, TokenID, user)
		if err := os.WriteFile(l.UserCfgPath(), []byte(userCfg), 0o640); err != nil {
			return err
		}
		if err := os.WriteFile(l.SecretsPath(), []byte("proxmox:\n  tokenSecret: "+uuid+"\n"), 0o600); err != nil {
			return err
		}
	}
	first := l.Nodes()[0] // a cluster's VM goes on its first node
	cfg := fmt.Sprintf(`# Written by labsim up: mgmtctl against the simulated lab in %s.
apiVersion: mgmtctl/v1alpha1
kind: ManagementCluster
metadata:
  name: lab-mgmt
spec:
  proxmox:
    host: %s
    user: root
    node: %s
    apiURL: https://%s:8006
    tokenID: %s
    storage: local-lvm
    imageDir: /var/lib/vz/template/iso
  image:
    url: https://%s%s
    sha256: %s
  vm:
    id: %d
    cores: 2
    memoryMiB: 4096
    diskGiB: 30
    bridge: vmbr0
    vlan: 4
    address: %s/24
    gateway: 192.0.2.1
    nameservers: [192.0.2.1]
    user: ubuntu
    sshPublicKeyFile: ~/.ssh/id_ed25519.pub
  kubeconfig:
    path: ~/.kube/lab-mgmt.kubeconfig
`, l.Dir, first.Addr, first.Name, first.Addr, TokenID, ImageHost, ImagePath, imageSHA, VMID, VMAddr)
	if err := os.WriteFile(l.ConfigPath(), []byte(cfg), 0o644); err != nil {
		return err
	}
	nodes := l.Nodes()
	if len(nodes) < 3 {
		return nil
	}
	// A Proxmox cluster: also the highly available form, one server on
	// each of the first three nodes, the API at the VIP.
	ha := strings.Replace(cfg, fmt.Sprintf("    host: %s\n    user: root\n    node: %s\n", first.Addr, first.Name), "    user: root\n", 1)
	ha = strings.Replace(ha, fmt.Sprintf("    id: %d\n", VMID), "", 1)
	ha = strings.Replace(ha, fmt.Sprintf("    address: %s/24\n", VMAddr), "", 1)
	ha += "  servers:\n"
	for i, n := range nodes[:3] {
		ha += fmt.Sprintf("    - {node: %s, host: %s, id: %d, address: 192.0.2.%d/24}\n", n.Name, n.Addr, VMID+i, 50+i)
	}
	ha += "  vip:\n    address: " + VIPAddr + "\n"
	return os.WriteFile(l.HAConfigPath(), []byte(ha), 0o644)
}

// Down stops the lab and removes every namespace, process and file it made.
// It works on a crashed lab too, and on one that is already down.
func (l *Lab) Down(out io.Writer) error {
	if l.daemonAlive() {
		// The daemon answers once it has torn everything down.
		_, _ = Call(l.ControlSocket(), Request{Op: "stop"}, 2*time.Minute)
	}
	if err := l.cleanup(); err != nil {
		return err
	}
	if exists(l.marker()) {
		for _, m := range made {
			if err := os.RemoveAll(l.path(m)); err != nil {
				return err
			}
		}
		_ = os.Remove(l.Dir) // only if empty: the user's own files stay
	}
	fmt.Fprintf(out, "lab down: %s removed\n", l.Dir)
	return nil
}

// Stop powers the lab off and keeps its files, as pulling the plug on
// every host would: each VM halts where it is (its disk as it was), the
// daemon and the namespaces go. `labsim up` on the same directory, or on
// a copy of it, starts the hosts again from those files; VMs stay off
// until `qm start`, as on a Proxmox node whose VMs do not start on boot.
func (l *Lab) Stop(out io.Writer) error {
	if !exists(l.marker()) {
		return fmt.Errorf("%s is not a lab", l.Dir)
	}
	if l.daemonAlive() {
		_, _ = Call(l.ControlSocket(), Request{Op: "stop"}, 2*time.Minute)
	}
	if err := l.cleanup(); err != nil {
		return err
	}
	fmt.Fprintf(out, "lab stopped: %s kept (labsim up --dir %s starts it again)\n", l.Dir, l.Dir)
	return nil
}

// cleanup kills the daemon if its pid file names a live one, and removes
// every namespace with the lab's prefix (killing what runs in them).
func (l *Lab) cleanup() error {
	if b, err := os.ReadFile(l.path("daemon.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			if isDaemon(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = os.Remove(l.path("daemon.pid"))
	}
	err := l.Net.Destroy()
	_ = os.Remove(l.ControlSocket())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// isDaemon checks that pid is a labsim daemon, so a stale pid file never
// kills an unrelated process.
func isDaemon(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), "labsim") && strings.Contains(string(b), "daemon")
}

// S3CredentialsPath holds the keys of the lab's S3 root user, "<access>
// <secret>" (0600): a user's copy of them goes into secrets.yaml.
func (l *Lab) S3CredentialsPath() string { return l.path("pki", "s3-credentials") }

// S3Ready exists while the lab's S3 serves its buckets; it holds the
// endpoint's URL.
func (l *Lab) S3Ready() string { return l.path("hosts", "mirror", "s3-ready") }

// writeS3Credentials makes the S3 root user's keys once.
func (l *Lab) writeS3Credentials() error {
	if exists(l.S3CredentialsPath()) {
		return nil
	}
	b := make([]byte, 30)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	h := strings.ToUpper(hex.EncodeToString(b[:10]))
	return os.WriteFile(l.S3CredentialsPath(), []byte("LAB"+h[:17]+" "+hex.EncodeToString(b[10:])+"\n"), 0o600)
}

// CABundle is the laptop's view of trusted CAs inside the lab: the
// machine's own bundle plus the lab CA, which signs the mirror's and the
// Proxmox API's certificates (as a user's laptop trusts their Proxmox CA).
func (l *Lab) CABundle() string { return l.path("pki", "laptop-ca-bundle.crt") }

func (l *Lab) writeCABundle(ca []byte) error {
	sys, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	return os.WriteFile(l.CABundle(), append(append(sys, '\n'), ca...), 0o644)
}

// writeLaptopHosts writes the laptop's hosts file: the machine's, then
// each internet name at the mirror.
func (l *Lab) writeLaptopHosts() error {
	sys, _ := os.ReadFile("/etc/hosts")
	var b strings.Builder
	b.Write(sys)
	if len(sys) > 0 && sys[len(sys)-1] != '\n' {
		b.WriteByte('\n')
	}
	for _, n := range MirrorNames {
		fmt.Fprintf(&b, "%s\t%s\n", MirrorAddr, n)
	}
	return os.WriteFile(l.LaptopHosts(), []byte(b.String()), 0o644)
}

package lab_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/lab/internal/lab"
	"github.com/mgmtctl/mgmtctl/lab/labtest"
)

// createVM is the qm create mgmtctl's vm phase issues (docs/upstream.md §1.2).
const createVM = `set -e
cd /var/lib/vz/template/iso
curl -fsS -o noble-server-cloudimg-amd64.img https://cloud-images.ubuntu.com/noble/20260926/noble-server-cloudimg-amd64.img
cp /root/.ssh/authorized_keys /root/vm.pub
qm create 110 --name lab-mgmt --cores 2 --memory 4096 --net0 virtio,bridge=vmbr0,tag=4 --scsihw virtio-scsi-pci \
  --scsi0 local-lvm:0,import-from=/var/lib/vz/template/iso/noble-server-cloudimg-amd64.img --ide2 local-lvm:cloudinit \
  --boot order=scsi0 --serial0 socket --vga serial0 --agent 1 --ciuser ubuntu --sshkeys /root/vm.pub \
  --ipconfig0 ip=192.0.2.50/24,gw=192.0.2.1 --nameserver 192.0.2.1 --tags mgmtctl`

func TestPlainSSHToProxmox(t *testing.T) {
	t.Parallel()
	l := labtest.Start(t)
	r := l.PVE("hostname; qm status 110")
	if r.Code != 2 || r.Stdout != "pve\n" || r.Stderr != "Configuration file 'nodes/pve/qemu-server/110.conf' does not exist\n" {
		t.Fatalf("got %+v", r)
	}
	// A plain ssh in the laptop namespace, as docs/lab.md promises: OpenSSH
	// takes ~/.ssh from the passwd entry, where the laptop's key and
	// known_hosts are bound. The root's dotfiles are Debian's own.
	if r := l.Run("", "ssh", "-o", "BatchMode=yes", "root@"+lab.PVEAddr, "qm list; head -1 ~/.bashrc"); r.Code != 0 || r.Stdout != "# ~/.bashrc: executed by bash(1) for non-login shells.\n" {
		t.Errorf("plain ssh root@%s: %+v", lab.PVEAddr, r)
	}
	// The node has no route out: only the lab's addresses answer.
	if r := l.PVE("ip route"); !strings.Contains(r.Stdout, "default via 192.0.2.1") || strings.Count(r.Stdout, "\n") != 2 {
		t.Errorf("routes: %q", r.Stdout)
	}
	// The laptop's known_hosts vouches for the node, so an unknown key is
	// refused: a known_hosts without it fails with OpenSSH's own error.
	empty := filepath.Join(l.LaptopHome(), "empty_known_hosts")
	os.WriteFile(empty, nil, 0o644)
	if r := l.SSH("root", lab.PVEAddr, empty, "true"); r.Code == 0 || !strings.Contains(r.Stderr, "Host key verification failed") {
		t.Errorf("unknown host key accepted: %+v", r)
	}
	// The mirror stands in for the internet by the real names, over TLS
	// the node trusts.
	if r := l.PVE("curl -fsS https://cloud-images.ubuntu.com/noble/20260926/SHA256SUMS"); r.Code != 0 || !strings.HasSuffix(r.Stdout, " *noble-server-cloudimg-amd64.img\n") {
		t.Errorf("SHA256SUMS: %+v", r)
	}
	if r := l.PVE("curl -sS -o /dev/null -w '%{http_code}' https://cloud-images.ubuntu.com/noble/20991231/x.img"); r.Stdout != "404" {
		t.Errorf("unknown path: %+v", r)
	}
	// The Proxmox API accepts the lab's token, and only it, the way CAPMOX
	// authenticates.
	tok, err := os.ReadFile(l.TokenPath())
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(tok))
	ca := filepath.Join(l.Dir, "pki/ca.crt")
	api := func(auth string) labtest.Result {
		return l.Run("", "curl", "-sS", "--cacert", ca, "-o", "/dev/null", "-w", "%{http_code}", "-H", "Authorization: "+auth, "https://"+lab.PVEAddr+":8006/api2/json/version")
	}
	if r := api("PVEAPIToken=" + f[0] + "=" + f[1]); r.Stdout != "200" {
		t.Errorf("right token: %+v", r)
	}
	if r := api("PVEAPIToken=" + f[0] + "=00000000-0000-4000-8000-000000000000"); r.Stdout != "401" {
		t.Errorf("wrong secret: %+v", r)
	}
	if b, _ := os.ReadFile(l.SecretsPath()); !strings.Contains(string(b), "tokenSecret: "+f[1]) {
		t.Errorf("secrets.yaml does not hold the node's token secret")
	}
}

func TestVMLifecycle(t *testing.T) {
	t.Parallel()
	l := labtest.Start(t)
	if r := l.PVE(createVM); r.Code != 0 {
		t.Fatalf("create: %+v", r)
	}
	r := l.PVE("qm config 110")
	for _, want := range []string{"scsi0: local-lvm:vm-110-disk-0,size=3584M\n", "sshkeys: ssh-ed25519%20", "net0: virtio=BC:24:11:"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("config lacks %q:\n%s", want, r.Stdout)
		}
	}
	if r := l.PVE("qm start 110 && qm status 110"); r.Code != 0 || r.Stdout != "generating cloud-init ISO\nstatus: running\n" {
		t.Fatalf("start: %+v", r)
	}
	if err := l.WaitVM(110); err != nil {
		t.Fatal(err)
	}
	kh := filepath.Join(l.LaptopHome(), "vm_known_hosts")
	hostKey := l.VMHostKey(110)
	os.WriteFile(kh, []byte(lab.VMAddr+" "+hostKey+"\n"), 0o644)
	r = l.SSH("ubuntu", lab.VMAddr, kh, "hostname; sudo -n id -u; cloud-init status --wait")
	if r.Code != 0 || !strings.HasPrefix(r.Stdout, "lab-mgmt\n0\n") || !strings.HasSuffix(r.Stdout, "status: done\n") {
		t.Fatalf("VM: %+v", r)
	}
	pveKey, _ := os.ReadFile(filepath.Join(l.HostDisk("pve"), "ssh_host_ed25519_key.pub"))
	realKey, _ := os.ReadFile("/etc/ssh/ssh_host_ed25519_key.pub")
	if k := strings.Fields(hostKey)[1]; strings.Contains(string(pveKey), k) || (len(realKey) > 0 && strings.Contains(string(realKey), k)) {
		t.Error("the VM's host key is not freshly generated")
	}
	if r := l.PVE("qm start 110"); r.Code != 255 || r.Stderr != "VM 110 already running\n" {
		t.Errorf("start running: %+v", r)
	}
	if r := l.PVE("qm destroy 110"); r.Code == 0 || !strings.Contains(r.Stderr, "VM 110 is running - destroy failed") {
		t.Errorf("destroy running: %+v", r)
	}
	// The guest agent is not in Ubuntu's cloud image until installed and
	// started; then qm guest answers from inside the VM.
	if r := l.PVE("qm guest cmd 110 ping"); r.Code == 0 || r.Stderr != "QEMU guest agent is not running\n" {
		t.Errorf("guest cmd: %+v", r)
	}
	if r := l.SSH("ubuntu", lab.VMAddr, kh, "sudo apt-get install -y qemu-guest-agent && dpkg-query -W -f='${Status}' qemu-guest-agent && sudo systemctl start qemu-guest-agent && systemctl is-active qemu-guest-agent"); r.Code != 0 || !strings.HasSuffix(r.Stdout, "install ok installedactive\n") {
		t.Fatalf("install guest agent: %+v", r)
	}
	if r := l.PVE("qm guest cmd 110 network-get-interfaces"); r.Code != 0 || !strings.Contains(r.Stdout, `"ip-address" : "192.0.2.50"`) {
		t.Errorf("network-get-interfaces: %+v", r)
	}
	if r := l.PVE("qm guest exec 110 -- cat /etc/ssh/ssh_host_ed25519_key.pub"); r.Code != 0 || !strings.Contains(r.Stdout, strings.Fields(hostKey)[1]) {
		t.Errorf("guest exec: %+v", r)
	}
	// A file written on the VM's disk survives stop/start, and so does its
	// host key; the namespace goes away while it is stopped.
	l.SSH("ubuntu", lab.VMAddr, kh, "echo kept > ~/marker")
	if r := l.PVE("qm stop 110 && qm status 110"); r.Stdout != "status: stopped\n" {
		t.Fatalf("stop: %+v", r)
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), l.Net.NS("vm110")) {
		t.Error("stopped VM's namespace still exists")
	}
	if r := l.PVE("qm start 110"); r.Code != 0 {
		t.Fatal(r)
	}
	if err := l.WaitVM(110); err != nil {
		t.Fatal(err)
	}
	if r := l.SSH("ubuntu", lab.VMAddr, kh, "cat ~/marker"); r.Stdout != "kept\n" {
		t.Errorf("disk did not survive a restart: %+v", r)
	}
	if r := l.PVE("qm stop 110 && qm destroy 110 >/dev/null && qm list"); r.Code != 0 || strings.Contains(r.Stdout, "110") {
		t.Errorf("destroy: %+v", r)
	}
	if _, err := os.Stat(l.VMDisk(110)); !os.IsNotExist(err) {
		t.Errorf("destroyed VM's disk remains")
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	l := labtest.Start(t)
	sum := func() string {
		return l.PVE("curl -fsS https://cloud-images.ubuntu.com/noble/20260926/noble-server-cloudimg-amd64.img | sha256sum | cut -d' ' -f1").Stdout
	}
	want := strings.Fields(l.PVE("curl -fsS https://cloud-images.ubuntu.com/noble/20260926/SHA256SUMS").Stdout)[0] + "\n"
	if got := sum(); got != want {
		t.Fatalf("image sum %q, SHA256SUMS says %q", got, want)
	}
	if err := l.SetFault("corrupt-image", "", true); err != nil {
		t.Fatal(err)
	}
	if got := sum(); got == want {
		t.Error("corrupt-image fault served the right image")
	}
	l.SetFault("corrupt-image", "", false)
	if got := sum(); got != want {
		t.Error("image still corrupt after the fault was turned off")
	}

	l.SetFault("fail-boot", "", true)
	if r := l.PVE(createVM + "\nqm start 110"); r.Code != 0 {
		t.Fatal(r)
	}
	if err := l.WaitVM(110); err == nil || !strings.Contains(err.Error(), "VM boot failed") {
		t.Errorf("fail-boot: %v", err)
	}
	if r := l.PVE("qm status 110"); r.Stdout != "status: running\n" {
		t.Errorf("QEMU runs even if the guest does not boot: %+v", r)
	}
	if err := l.SetFault("no-such-fault", "", true); err == nil {
		t.Error("unknown fault accepted")
	}
}

// TestDownAfterKilledDaemon: a lab whose daemon died still comes down
// whole: no namespace, process, mount or file left.
func TestDownAfterKilledDaemon(t *testing.T) {
	t.Parallel()
	labtest.Skip(t)
	bin := labtest.Binary(t)
	dir, _ := os.MkdirTemp("", "lab-")
	l, _ := lab.Open(dir)
	if out, err := exec.Command(bin, "up", "--dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "daemon.pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 1 {
		t.Fatal("no daemon pid")
	}
	syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 2; i++ { // down is idempotent
		if out, err := exec.Command(bin, "down", "--dir", dir).CombinedOutput(); err != nil {
			t.Fatalf("down: %v %s", err, out)
		}
	}
	if ns := l.Net.List(); len(ns) != 0 {
		t.Errorf("namespaces left: %v", ns)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("lab directory left")
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		c, _ := os.ReadFile(p)
		if strings.Contains(string(c), dir) {
			t.Errorf("process left: %s", strings.ReplaceAll(string(c), "\x00", " "))
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), dir) || strings.Contains(string(mounts), l.Net.Prefix) {
		t.Errorf("mounts left:\n%s", mounts)
	}
}

// TestK3s: the install script with its variables, k3s --version, the
// server's kubeconfig and certificate, the node Ready, upgrades and the
// installer's change detection (docs/upstream.md §2.1-2.4).
func TestK3s(t *testing.T) {
	t.Parallel()
	l := labtest.Start(t)
	if r := l.PVE(createVM + "\nqm start 110"); r.Code != 0 {
		t.Fatal(r)
	}
	if err := l.WaitVM(110); err != nil {
		t.Fatal(err)
	}
	kh := filepath.Join(l.LaptopHome(), "vm_known_hosts")
	os.WriteFile(kh, []byte(lab.VMAddr+" "+l.VMHostKey(110)+"\n"), 0o644)
	vm := func(cmd string) labtest.Result { return l.SSH("ubuntu", lab.VMAddr, kh, cmd) }
	install := func(env string) labtest.Result {
		return vm("curl -sfL https://get.k3s.io | sudo " + env + " sh -")
	}
	if r := vm("cloud-init status --wait >/dev/null && sudo mkdir -p /etc/rancher/k3s && printf 'tls-san:\\n- mgmt.lab.example\\nwrite-kubeconfig-mode: \"0600\"\\ndisable:\\n- traefik\\n' | sudo tee /etc/rancher/k3s/config.yaml"); r.Code != 0 {
		t.Fatal(r)
	}
	if r := install("INSTALL_K3S_VERSION=v1.99.0+k3s1"); r.Code != 1 || !strings.Contains(r.Stderr, "[ERROR]  Download failed") {
		t.Errorf("unknown version: %+v", r)
	}
	r := install("INSTALL_K3S_VERSION=v1.35.7+k3s1")
	if r.Code != 0 || !strings.Contains(r.Stdout, "[INFO]  Using v1.35.7+k3s1 as release\n") || !strings.Contains(r.Stdout, "[INFO]  systemd: Starting k3s\n") {
		t.Fatalf("install: %+v", r)
	}
	if r := vm("k3s --version"); !strings.HasPrefix(r.Stdout, "k3s version v1.35.7+k3s1 (") || !strings.Contains(r.Stdout, "\ngo version go1.") {
		t.Errorf("version: %q", r.Stdout)
	}
	if r := vm("sudo stat -c '%a %U' /etc/rancher/k3s/k3s.yaml /etc/systemd/system/k3s.service.env && systemctl is-active k3s"); r.Stdout != "600 root\n600 root\nactive\n" {
		t.Errorf("files: %+v", r)
	}
	// k3s.yaml points at 127.0.0.1 with "default" names; with the server
	// changed to the VM's address, the laptop's kubectl verifies TLS.
	r = vm("sudo cat /etc/rancher/k3s/k3s.yaml")
	if !strings.Contains(r.Stdout, "server: https://127.0.0.1:6443") || !strings.Contains(r.Stdout, "current-context: default") {
		t.Fatalf("k3s.yaml:\n%s", r.Stdout)
	}
	kc := filepath.Join(l.LaptopHome(), "k3s.yaml")
	os.WriteFile(kc, []byte(strings.Replace(r.Stdout, "127.0.0.1", lab.VMAddr, 1)), 0o600)
	kubectl := labtest.Kubectl(t)
	r = l.Run("", kubectl, "--kubeconfig", kc, "get", "nodes", "-o", "jsonpath={.items[0].metadata.name} {.items[0].status.conditions[?(@.type==\"Ready\")].status} {.items[0].status.nodeInfo.kubeletVersion}")
	if r.Stdout != "lab-mgmt True v1.35.7+k3s1" {
		t.Errorf("node: %+v", r)
	}
	// The API server reports the release it was installed as
	// (docs/upstream.md §2.2), not the Kubernetes it was built from.
	if got := serverVersion(t, l, kc); got != "v1.35.7+k3s1 1.35" {
		t.Errorf("server version: %s", got)
	}
	if r := l.Run("", kubectl, "--kubeconfig", kc, "get", "crd", "helmcharts.helm.cattle.io", "-o", "name"); r.Code != 0 {
		t.Errorf("helm-controller CRDs: %+v", r)
	}
	sans := l.Run("", "sh", "-c", "echo | openssl s_client -connect 192.0.2.50:6443 2>/dev/null | openssl x509 -noout -ext subjectAltName")
	for _, want := range []string{"DNS:mgmt.lab.example", "DNS:lab-mgmt", "DNS:kubernetes.default.svc.cluster.local", "IP Address:192.0.2.50", "IP Address:127.0.0.1"} {
		if !strings.Contains(sans.Stdout, want) {
			t.Errorf("SANs lack %s: %s", want, sans.Stdout)
		}
	}
	// Same version again: no restart. Skip-download: the binary must be
	// there. A new version: upgrade and restart once.
	if r := install("INSTALL_K3S_VERSION=v1.35.7+k3s1"); !strings.Contains(r.Stdout, "[INFO]  Skipping binary downloaded, installed k3s matches hash\n") || !strings.Contains(r.Stdout, "[INFO]  No change detected so skipping service start\n") {
		t.Errorf("re-run: %+v", r)
	}
	if r := install("INSTALL_K3S_SKIP_DOWNLOAD=true"); !strings.Contains(r.Stdout, "[INFO]  Skipping k3s download and verify\n") {
		t.Errorf("skip download: %+v", r)
	}
	if r := install("INSTALL_K3S_VERSION=v1.36.3+k3s1"); r.Code != 0 || !strings.Contains(r.Stdout, "[INFO]  systemd: Starting k3s\n") {
		t.Fatalf("upgrade: %+v", r)
	}
	r = l.Run("", kubectl, "--kubeconfig", kc, "get", "nodes", "-o", "jsonpath={.items[0].status.nodeInfo.kubeletVersion}")
	if r.Stdout != "v1.36.3+k3s1" {
		t.Errorf("after upgrade: %+v", r)
	}
	if got := serverVersion(t, l, kc); got != "v1.36.3+k3s1 1.36" {
		t.Errorf("server version after upgrade: %s", got)
	}
	log, _ := os.ReadFile(filepath.Join(l.VMDisk(110), "upper/var/lib/labsim/units/k3s.service.log"))
	if strings.Count(string(log), " restart") != 1 || strings.Count(string(log), " start") != 2 {
		t.Errorf("k3s starts and restarts:\n%s", log)
	}
	// The unit carries INSTALL_K3S_EXEC's flags, one quoted line each.
	if r := install("INSTALL_K3S_VERSION=v1.36.3+k3s1 INSTALL_K3S_EXEC='server --disable=servicelb'"); r.Code != 0 {
		t.Fatal(r)
	}
	if r := vm("cat /etc/systemd/system/k3s.service"); !strings.Contains(r.Stdout, "ExecStart=/usr/local/bin/k3s \\\n    server \\\n\t'--disable=servicelb' \\\n") {
		t.Errorf("unit:\n%s", r.Stdout)
	}

	// The deploy controller applies the manifests directory at start (and
	// on every 15 s rescan), tracking each file as an Addon.
	manifest := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\n  namespace: default\ndata:\n  k: v\n"
	if r := vm("printf '" + manifest + "' | sudo tee /var/lib/rancher/k3s/server/manifests/demo.yaml >/dev/null && sudo systemctl restart k3s"); r.Code != 0 {
		t.Fatal(r)
	}
	if r := l.Run("", kubectl, "--kubeconfig", kc, "get", "configmap", "demo", "-o", "jsonpath={.data.k}"); r.Stdout != "v" {
		t.Errorf("manifest not applied: %+v", r)
	}
	r = l.Run("", kubectl, "--kubeconfig", kc, "-n", "kube-system", "get", "addons.k3s.cattle.io", "demo", "-o", "jsonpath={.spec.source} {.spec.checksum}")
	if !strings.HasPrefix(r.Stdout, "/var/lib/rancher/k3s/server/manifests/demo.yaml ") || len(strings.Fields(r.Stdout)) != 2 || len(strings.Fields(r.Stdout)[1]) != 64 {
		t.Errorf("addon: %+v", r)
	}
	testEtcd(t, l, vm, kc)
}

// testEtcd: the datastore and its snapshots, as k3s has them. Without
// cluster-init a lone server is SQLite and refuses a snapshot; with it,
// the data moves to etcd on restart; a snapshot saved then restores the
// cluster as it was, under the token it was taken with and no other.
func testEtcd(t *testing.T, l *labtest.Lab, vm func(string) labtest.Result, kc string) {
	kubectl := func(args ...string) labtest.Result {
		return l.Run("", append([]string{labtest.Kubectl(t), "--kubeconfig", kc}, args...)...)
	}
	if r := vm("sudo k3s etcd-snapshot save"); r.Code != 1 || !strings.Contains(r.Stderr, `level=fatal msg="Error: see server log for details: etcd datastore disabled"`) {
		t.Errorf("snapshot of SQLite: %+v", r)
	}
	if r := vm("echo 'cluster-init: true' | sudo tee -a /etc/rancher/k3s/config.yaml >/dev/null && sudo systemctl restart k3s"); r.Code != 0 {
		t.Fatal(r)
	}
	if r := kubectl("get", "configmap", "demo", "-o", "jsonpath={.data.k}"); r.Stdout != "v" {
		t.Errorf("data lost converting to etcd: %+v", r)
	}
	if r := kubectl("get", "node", "lab-mgmt", "-o", `jsonpath={.metadata.labels.node-role\.kubernetes\.io/etcd}`); r.Stdout != "true" {
		t.Errorf("etcd role: %+v", r)
	}
	r := vm("sudo k3s etcd-snapshot save --name t && sudo k3s etcd-snapshot ls && sudo stat -c '%a' /var/lib/rancher/k3s/server/token && sudo cat /var/lib/rancher/k3s/server/token")
	m := regexp.MustCompile(`Snapshot (t-lab-mgmt-\d+) saved\.`).FindStringSubmatch(r.Stderr)
	if r.Code != 0 || m == nil || !strings.Contains(r.Stdout, "file:///var/lib/rancher/k3s/server/db/snapshots/"+m[1]) || !strings.Contains(r.Stdout, "\n600\nK10") {
		t.Fatalf("snapshot: %+v", r)
	}
	token := strings.TrimSpace(r.Stdout[strings.LastIndex(r.Stdout, "\nK10")+1:])
	snap := "/var/lib/rancher/k3s/server/db/snapshots/" + m[1]
	if r := kubectl("create", "configmap", "after-snapshot"); r.Code != 0 {
		t.Fatal(r)
	}
	reset := "sudo systemctl stop k3s && sudo k3s server --cluster-reset --cluster-reset-restore-path=" + snap
	if r := vm(reset + " --token=K10other::server:wrong"); r.Code != 1 || !strings.Contains(r.Stderr, "bootstrap data already found and encrypted with different token") {
		t.Errorf("restore with another token: %+v", r)
	}
	// k3s moves the data it replaces to db/etcd-old-<unix seconds>, so a
	// second reset in the same second would find that name taken ("file
	// exists"), as upstream's would. The failed attempt's moved-aside data
	// is cleared here as an operator would, which also shows it was kept.
	if r := vm("sudo sh -c 'ls -d /var/lib/rancher/k3s/server/db/etcd-old-* && rm -rf /var/lib/rancher/k3s/server/db/etcd-old-*'"); r.Code != 0 {
		t.Errorf("the data the failed reset replaced: %+v", r)
	}
	r = vm(reset + " --token=" + token + " && sudo test -e /var/lib/rancher/k3s/server/db/reset-flag && sudo systemctl start k3s")
	if r.Code != 0 || !strings.Contains(r.Stderr, "Managed etcd cluster membership has been reset, restart without --cluster-reset flag now.") {
		t.Fatalf("restore: %+v", r)
	}
	if r := kubectl("get", "configmap", "after-snapshot", "demo", "-o", "name", "--ignore-not-found"); r.Stdout != "configmap/demo\n" {
		t.Errorf("after the restore: %+v", r)
	}
	if r := vm("sudo test -e /var/lib/rancher/k3s/server/db/reset-flag"); r.Code == 0 {
		t.Error("the reset flag outlived a normal start")
	}
}

// serverVersion is what `kubectl version` says of the server: gitVersion
// and major.minor.
func serverVersion(t *testing.T, l *labtest.Lab, kubeconfig string) string {
	t.Helper()
	r := l.Run("", labtest.Kubectl(t), "--kubeconfig", kubeconfig, "version", "-o", "json")
	var v struct {
		Server struct{ GitVersion, Major, Minor string } `json:"serverVersion"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &v); err != nil {
		t.Fatalf("kubectl version: %v: %+v", err, r)
	}
	return v.Server.GitVersion + " " + v.Server.Major + "." + v.Server.Minor
}

// TestProxmoxCluster: `labsim up --nodes 3` is a cluster of pve1..pve3
// sharing /etc/pve as pmxcfs does: a VMID exists once in the cluster (a
// create on another node names the node that has it; nextid skips it),
// qm on a node sees that node's VMs only, each node keeps its own image
// copy (local storage), and a VM created and started on any node boots on
// the lab's network. Every node answers SSH and the Proxmox API.
func TestProxmoxCluster(t *testing.T) {
	t.Parallel()
	l := labtest.StartNodes(t, 3)
	nodes := l.Nodes()
	if len(nodes) != 3 || nodes[1].Name != "pve2" || nodes[1].Addr != "192.0.2.11" {
		t.Fatalf("nodes: %+v", nodes)
	}
	for _, n := range nodes {
		if r := l.OnNode(n.Name, "hostname && curl -s -o /dev/null -w '%{http_code}' https://"+n.Name+":8006/api2/json/version"); r.Stdout != n.Name+"\n401" {
			t.Errorf("%s: %+v", n.Name, r)
		}
	}
	if r := l.OnNode("pve1", createVM+" && qm start 110"); r.Code != 0 {
		t.Fatal(r)
	}
	if r := l.OnNode("pve2", "qm create 110 --name other"); r.Code != 255 || r.Stderr != "unable to create VM 110 - VM 110 already exists on node 'pve1'\n" {
		t.Errorf("VMID taken on another node: %+v", r)
	}
	if r := l.OnNode("pve2", "qm status 110"); r.Code != 2 || r.Stderr != "Configuration file 'nodes/pve2/qemu-server/110.conf' does not exist\n" {
		t.Errorf("qm on another node's VM: %+v", r)
	}
	if r := l.OnNode("pve3", "pvesh get /cluster/nextid --vmid 110"); r.Code == 0 || !strings.Contains(r.Stderr, "VM 110 already exists") {
		t.Errorf("nextid --vmid 110: %+v", r)
	}
	if r := l.OnNode("pve2", "ls /var/lib/vz/template/iso; ls /etc/pve/nodes/pve1/qemu-server"); r.Stdout != "110.conf\n" {
		t.Errorf("pve2 has its own (empty) image store and sees the cluster's configs: %+v", r)
	}
	second := strings.NewReplacer("qm create 110", "qm create 120", "192.0.2.50/24", "192.0.2.51/24", "--name lab-mgmt", "--name second").Replace(createVM)
	if r := l.OnNode("pve2", second+" && qm start 120 && qm list"); r.Code != 0 || !strings.Contains(r.Stdout, "120 second") || strings.Contains(r.Stdout, "lab-mgmt") {
		t.Fatalf("VM on pve2: %+v", r)
	}
	for _, id := range []int{110, 120} {
		if err := l.WaitVM(id); err != nil {
			t.Errorf("VM %d: %v", id, err)
		}
	}
	kh := filepath.Join(l.LaptopHome(), "vm_known_hosts")
	os.WriteFile(kh, []byte("192.0.2.51 "+l.VMHostKey(120)+"\n"), 0o644)
	if r := l.SSH("ubuntu", "192.0.2.51", kh, "hostname"); r.Stdout != "second\n" {
		t.Errorf("VM 120: %+v", r)
	}
}

// TestK3sHA: three k3s servers with embedded etcd on three VMs on three
// Proxmox nodes. The first runs with cluster-init, the others join it with
// its token; each runs a real etcd member and API server, so quorum is
// etcd's: with one server stopped the API still writes through the other
// two, with two stopped it cannot, and a stopped server started again
// rejoins. A join with another token is refused.
func TestK3sHA(t *testing.T) {
	t.Parallel()
	l := labtest.StartNodes(t, 3)
	kh := filepath.Join(l.LaptopHome(), "vm_known_hosts")
	addr := func(i int) string { return fmt.Sprintf("192.0.2.%d", 50+i) }
	for i, n := range l.Nodes() {
		create := strings.NewReplacer("qm create 110", fmt.Sprintf("qm create %d", 110+i), "192.0.2.50/24", addr(i)+"/24",
			"--name lab-mgmt", fmt.Sprintf("--name srv%d", i+1)).Replace(createVM)
		if r := l.OnNode(n.Name, create+fmt.Sprintf(" && qm start %d", 110+i)); r.Code != 0 {
			t.Fatal(r)
		}
	}
	var known strings.Builder
	for i := range 3 {
		if err := l.WaitVM(110 + i); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&known, "%s %s\n", addr(i), l.VMHostKey(110+i))
	}
	os.WriteFile(kh, []byte(known.String()), 0o644)
	vm := func(i int, cmd string) labtest.Result { return l.SSH("ubuntu", addr(i), kh, cmd) }
	server := func(i int, config string) labtest.Result {
		return vm(i, "cloud-init status --wait >/dev/null && sudo mkdir -p /etc/rancher/k3s && printf '"+config+"' | sudo tee /etc/rancher/k3s/config.yaml >/dev/null && curl -sfL https://get.k3s.io | sudo INSTALL_K3S_VERSION=v1.35.7+k3s1 sh - && sudo systemctl start k3s")
	}
	if r := server(0, "cluster-init: true\\nwrite-kubeconfig-mode: \"0600\"\\ntls-san:\\n  - 192.0.2.60\\n"); r.Code != 0 {
		t.Fatalf("first server: %+v", r)
	}
	token := strings.TrimSpace(vm(0, "sudo cat /var/lib/rancher/k3s/server/token").Stdout)
	if r := server(1, "server: https://192.0.2.50:6443\\ntoken: K10bad::server:wrong\\n"); r.Code == 0 {
		t.Errorf("a join with another token started: %+v", r)
	}
	if r := vm(1, "sudo systemctl stop k3s; sudo rm -rf /var/lib/rancher/k3s/server/db"); r.Code != 0 {
		t.Fatal(r)
	}
	for _, i := range []int{1, 2} {
		if r := server(i, "server: https://192.0.2.50:6443\\ntoken: "+token+"\\ntls-san:\\n  - 192.0.2.60\\n"); r.Code != 0 {
			t.Fatalf("server %d: %+v", i+1, r)
		}
	}
	kubeconfig := func(i int) string {
		kc := filepath.Join(l.LaptopHome(), fmt.Sprintf("srv%d.yaml", i+1))
		r := vm(i, "sudo cat /etc/rancher/k3s/k3s.yaml")
		os.WriteFile(kc, []byte(strings.Replace(r.Stdout, "127.0.0.1", addr(i), 1)), 0o600)
		return kc
	}
	kc1, kc2 := kubeconfig(0), kubeconfig(1)
	kubectl := func(kc string, args ...string) labtest.Result {
		return l.Run("", append([]string{labtest.Kubectl(t), "--kubeconfig", kc, "--request-timeout", "8s"}, args...)...)
	}
	r := kubectl(kc2, "get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status},{.metadata.labels.node-role\.kubernetes\.io/etcd} {end}`)
	if r.Stdout != "srv1=True,true srv2=True,true srv3=True,true " {
		t.Fatalf("nodes: %+v", r)
	}
	testVIP(t, l, vm, kubectl, kc1)

	// The second server's API serves what was written through the first:
	// one datastore.
	if r := kubectl(kc1, "create", "configmap", "written-on-1"); r.Code != 0 {
		t.Fatal(r)
	}
	if r := kubectl(kc2, "get", "configmap", "written-on-1", "-o", "name"); r.Stdout != "configmap/written-on-1\n" {
		t.Errorf("read on server 2: %+v", r)
	}
	// One server down: two of three members keep quorum.
	if r := l.OnNode("pve1", "qm stop 110"); r.Code != 0 {
		t.Fatal(r)
	}
	// The members elect a new leader if the stopped one led: a write
	// may time out until then.
	var r1 labtest.Result
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if r1 = kubectl(kc2, "create", "configmap", "one-down"); r1.Code == 0 || strings.Contains(r1.Stderr, "AlreadyExists") {
			break
		}
	}
	if r1.Code != 0 && !strings.Contains(r1.Stderr, "AlreadyExists") {
		t.Errorf("write with one server down: %+v", r1)
	}
	// Two down: no quorum, no write.
	if r := l.OnNode("pve3", "qm stop 112"); r.Code != 0 {
		t.Fatal(r)
	}
	if r := kubectl(kc2, "create", "configmap", "two-down"); r.Code == 0 {
		t.Errorf("a write without quorum succeeded: %+v", r)
	}
	// Both back: they rejoin with their data, and the cluster writes again.
	// Both are started before either is waited for, as at a power cut's
	// end (labtest's Template.Start): a server's boot may wait for
	// etcd's quorum, which the one left running need not still offer.
	back := []struct {
		node string
		id   int
	}{{"pve1", 110}, {"pve3", 112}}
	for _, c := range back {
		if r := l.OnNode(c.node, fmt.Sprintf("qm start %d", c.id)); r.Code != 0 {
			t.Fatal(r)
		}
	}
	for _, c := range back {
		if err := l.WaitVM(c.id); err != nil {
			t.Fatal(err)
		}
	}
	if r := vm(0, "sudo systemctl start k3s && systemctl is-active k3s"); r.Stdout != "active\n" {
		t.Fatalf("server 1 back: %+v", r)
	}
	if r := vm(2, "sudo systemctl start k3s && systemctl is-active k3s"); r.Stdout != "active\n" {
		t.Fatalf("server 3 back: %+v", r)
	}
	if r := kubectl(kc1, "create", "configmap", "all-back"); r.Code != 0 {
		t.Errorf("write with all back: %+v", r)
	}
	if r := kubectl(kc1, "get", "configmap", "one-down", "-o", "name"); r.Stdout != "configmap/one-down\n" {
		t.Errorf("server 1 after rejoining: %+v", r)
	}
}

// kubeVIP is kube-vip's DaemonSet in ARP mode with control-plane leader
// election, as `kube-vip manifest daemonset --arp --controlplane
// --leaderElection` writes it (the lab's kubelet reads its container's
// env), with the ServiceAccount and RBAC kube-vip's docs have applied
// first (kube-vip.io/manifests/rbac.yaml): its pod holds the Lease with
// that ServiceAccount's token.
const kubeVIP = `apiVersion: v1
kind: ServiceAccount
metadata:
  name: kube-vip
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:kube-vip-role
rules:
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "update", "list", "put"]
- apiGroups: [""]
  resources: ["services", "services/status", "nodes", "endpoints"]
  verbs: ["list", "get", "watch", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:kube-vip-binding
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:kube-vip-role
subjects:
- kind: ServiceAccount
  name: kube-vip
  namespace: kube-system
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-vip-ds
  namespace: kube-system
spec:
  selector:
    matchLabels: {app.kubernetes.io/name: kube-vip-ds}
  template:
    metadata:
      labels: {app.kubernetes.io/name: kube-vip-ds}
    spec:
      hostNetwork: true
      serviceAccountName: kube-vip
      containers:
      - name: kube-vip
        image: ghcr.io/kube-vip/kube-vip:v1.2.3
        args: [manager]
        env:
        - {name: vip_arp, value: "true"}
        - {name: port, value: "6443"}
        - {name: vip_interface, value: eth0}
        - {name: vip_cidr, value: "32"}
        - {name: cp_enable, value: "true"}
        - {name: cp_namespace, value: kube-system}
        - {name: vip_leaderelection, value: "true"}
        - {name: vip_leasename, value: plndr-cp-lock}
        - {name: vip_leaseduration, value: "5"}
        - {name: vip_renewdeadline, value: "3"}
        - {name: vip_retryperiod, value: "1"}
        - {name: address, value: 192.0.2.60}
`

// testVIP: kube-vip deployed as a k3s manifest puts the VIP on the lease
// holder's eth0, announced by ARP, so the laptop reaches the API at
// 192.0.2.60; when the holder stops, another server takes the address
// over, and the API answers there again. The stopped server comes back.
func testVIP(t *testing.T, l *labtest.Lab, vm func(int, string) labtest.Result, kubectl func(string, ...string) labtest.Result, kc1 string) {
	b, _ := os.ReadFile(kc1)
	vip := filepath.Join(l.LaptopHome(), "vip.yaml")
	os.WriteFile(vip, []byte(strings.Replace(string(b), "192.0.2.50", "192.0.2.60", 1)), 0o600)
	if r := vm(0, "printf '%s' '"+kubeVIP+"' | sudo tee /var/lib/rancher/k3s/server/manifests/kube-vip.yaml >/dev/null"); r.Code != 0 {
		t.Fatal(r)
	}
	// k3s rescans its manifests every 15 s.
	viaVIP := func(within time.Duration) (string, time.Duration) {
		start := time.Now()
		var r labtest.Result
		for time.Since(start) < within {
			if r = kubectl(vip, "get", "lease", "-n", "kube-system", "plndr-cp-lock", "-o", "jsonpath={.spec.holderIdentity}"); r.Code == 0 && r.Stdout != "" {
				return r.Stdout, time.Since(start)
			}
		}
		t.Fatalf("the API does not answer at the VIP after %s: %+v", within, r)
		return "", 0
	}
	holder, took := viaVIP(60 * time.Second)
	t.Logf("VIP 192.0.2.60 up on %s after %s", holder, took)
	i := int(holder[len(holder)-1]-'0') - 1
	if r := vm(i, "ip -4 -o addr show dev eth0"); !strings.Contains(r.Stdout, "192.0.2.60/32") {
		t.Errorf("%s's eth0 lacks the VIP: %+v", holder, r)
	}
	node := l.Nodes()[i].Name
	if r := l.OnNode(node, fmt.Sprintf("qm stop %d", 110+i)); r.Code != 0 {
		t.Fatal(r)
	}
	next, took := viaVIP(60 * time.Second)
	for next == holder {
		next, took = viaVIP(60 * time.Second)
	}
	t.Logf("VIP moved from %s to %s in %s", holder, next, took)
	if r := l.OnNode(node, fmt.Sprintf("qm start %d", 110+i)); r.Code != 0 {
		t.Fatal(r)
	}
	if err := l.WaitVM(110 + i); err != nil {
		t.Fatal(err)
	}
	if r := vm(i, "sudo systemctl start k3s && systemctl is-active k3s"); r.Stdout != "active\n" {
		t.Fatalf("%s back: %+v", holder, r)
	}
}

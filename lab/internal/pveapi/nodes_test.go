package pveapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/lab/internal/qm"
)

type fakeGuests struct{ running map[int]bool }

func (f *fakeGuests) Boot(vmid int, c qm.Config) error  { f.running[vmid] = true; return nil }
func (f *fakeGuests) Halt(vmid int) error               { f.running[vmid] = false; return nil }
func (f *fakeGuests) Running(vmid int) (bool, error)    { return f.running[vmid], nil }
func (f *fakeGuests) Destroyed(int) error               { return nil }
func (f *fakeGuests) Uptime(int) (time.Duration, error) { return 7 * time.Second, nil }
func (f *fakeGuests) GuestUp(vmid int) (bool, error)    { return f.running[vmid], nil }
func (f *fakeGuests) GuestAgent(vmid int) (bool, error) { return f.running[vmid], nil }
func (f *fakeGuests) GuestExec(_ int, argv []string) (string, string, int, error) {
	if strings.Join(argv, " ") == "cat -- /etc/ssh/ssh_host_ed25519_key.pub" {
		return "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl root@vm\n", "", 0, nil
	}
	return "", "cat: " + argv[len(argv)-1] + ": No such file or directory\n", 1, nil
}

// apiLab is one node's API over a temporary root, with a token whose
// role the test chooses, and an HTTPS server holding the image.
type apiLab struct {
	t      *testing.T
	s      *Server
	root   string
	image  *httptest.Server
	imgSum string
	secret string
}

const apiToken = "mgmtctl@pve!vm"

func newAPILab(t *testing.T, privs string) *apiLab {
	root := t.TempDir()
	img := make([]byte, 4096)
	copy(img, "QFI\xfb")
	img[24+3] = 0x1 // a virtual size of 3.5 GiB: 0x0000_0000_e000_0000
	copy(img[24:32], []byte{0, 0, 0, 0, 0xe0, 0, 0, 0})
	sum := sha256.Sum256(img)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(img) }))
	t.Cleanup(srv.Close)
	os.MkdirAll(filepath.Join(root, "etc/pve"), 0o755)
	userCfg := "user:mgmtctl@pve:1:0::::::\ntoken:" + apiToken + ":0:1::\n\nrole:MgmtctlVM:" + privs + ":\n\nacl:1:/:mgmtctl@pve," + apiToken + ":MgmtctlVM:\n"
	os.WriteFile(filepath.Join(root, "etc/pve/user.cfg"), []byte(userCfg), 0o640)
	os.WriteFile(filepath.Join(root, "token.cfg"), []byte(apiToken+" 01234567-89ab-4def-8123-456789abcdef\n"), 0o600)
	guests := &fakeGuests{running: map[int]bool{}}
	s := &Server{Node: "pve", Root: root, Transport: srv.Client().Transport,
		Access: Access{Tokens: TokenConfig{Path: filepath.Join(root, "token.cfg")}, UserCfg: filepath.Join(root, "etc/pve/user.cfg")},
		QM: func(stdout, stderr io.Writer) *qm.Node {
			return &qm.Node{Name: "pve", Root: root, Backend: guests, Stdout: stdout, Stderr: stderr, Now: func() int64 { return 1 }}
		}}
	return &apiLab{t: t, s: s, root: root, image: srv, imgSum: hex.EncodeToString(sum[:]), secret: "01234567-89ab-4def-8123-456789abcdef"}
}

// call makes one API call and decodes its answer.
func (l *apiLab) call(method, path string, form url.Values) (int, json.RawMessage, string) {
	var body io.Reader
	if method != "GET" && method != "DELETE" {
		body = strings.NewReader(form.Encode())
	} else if form != nil {
		path += "?" + form.Encode()
	}
	req := httptest.NewRequest(method, "/api2/json"+path, body)
	req.Header.Set("Authorization", "PVEAPIToken="+apiToken+"="+l.secret)
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	rec := httptest.NewRecorder()
	l.s.ServeHTTP(rec, req)
	var out struct {
		Data    json.RawMessage `json:"data"`
		Message string          `json:"message"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		l.t.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
	}
	return rec.Code, out.Data, out.Message
}

// task waits for a UPID's task and returns its exit status and log.
func (l *apiLab) task(data json.RawMessage) (string, string) {
	var upid string
	if err := json.Unmarshal(data, &upid); err != nil || !strings.HasPrefix(upid, "UPID:pve:") {
		l.t.Fatalf("not a UPID: %s", data)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		_, st, _ := l.call("GET", "/nodes/pve/tasks/"+url.PathEscape(upid)+"/status", nil)
		var s struct{ Status, Exitstatus string }
		json.Unmarshal(st, &s)
		if s.Status == "stopped" {
			_, lg, _ := l.call("GET", "/nodes/pve/tasks/"+url.PathEscape(upid)+"/log", url.Values{"limit": {"500"}})
			var lines []struct{ T string }
			json.Unmarshal(lg, &lines)
			var b strings.Builder
			for _, ln := range lines {
				b.WriteString(ln.T + "\n")
			}
			return s.Exitstatus, b.String()
		}
	}
	l.t.Fatalf("task %s still running", upid)
	return "", ""
}

// mgmtctlPrivs are what mgmtctl's API mode needs (pveaccess's role for
// it): this test checks the lab asks no more and no less.
var mgmtctlPrivs = []string{"VM.Allocate", "VM.Audit", "VM.Config.CPU", "VM.Config.Memory", "VM.Config.HWType", "VM.Config.Options",
	"VM.Config.Disk", "VM.Config.Network", "VM.Config.Cloudinit", "VM.PowerMgmt", "VM.GuestAgent.Audit", "VM.GuestAgent.FileRead",
	"Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Audit", "Sys.AccessNetwork", "SDN.Use"}

func createForm(vmid string) url.Values {
	return url.Values{"vmid": {vmid}, "name": {"lab-mgmt"}, "cores": {"2"}, "memory": {"4096"},
		"net0": {"virtio,bridge=vmbr0,tag=20"}, "scsihw": {"virtio-scsi-pci"},
		"scsi0": {"local-lvm:0,import-from=local:import/noble.qcow2"}, "ide2": {"local-lvm:cloudinit"},
		"boot": {"order=scsi0"}, "serial0": {"socket"}, "vga": {"serial0"}, "agent": {"1"}, "ciuser": {"ubuntu"},
		"sshkeys":   {strings.ReplaceAll(url.QueryEscape("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@laptop\n"), "+", "%20")},
		"ipconfig0": {"ip=192.0.2.50/24,gw=192.0.2.1"}, "nameserver": {"192.0.2.1"}, "tags": {"mgmtctl"}}
}

// TestVMLife: the vm phase's calls, in order, with exactly mgmtctl's
// privileges: the image downloaded (a wrong checksum keeps nothing), the
// VM created from it, started, its host key read by the agent, resized,
// stopped and destroyed; each worker a UPID whose status and log say how
// it ended; and what qm then sees.
func TestVMLife(t *testing.T) {
	l := newAPILab(t, strings.Join(mgmtctlPrivs, ","))
	dl := url.Values{"url": {l.image.URL + "/noble.img"}, "content": {"import"}, "filename": {"noble.qcow2"},
		"checksum": {strings.Repeat("0", 64)}, "checksum-algorithm": {"sha256"}}
	code, data, msg := l.call("POST", "/nodes/pve/storage/local/download-url", dl)
	if code != 200 {
		t.Fatalf("download-url: %d %s", code, msg)
	}
	if exit, log := l.task(data); !strings.HasPrefix(exit, "checksum mismatch: got '"+l.imgSum+"'") || !strings.Contains(log, "TASK ERROR: checksum mismatch") {
		t.Fatalf("a wrong checksum: exit %q, log %q", exit, log)
	}
	if _, err := os.Stat(filepath.Join(l.root, "var/lib/vz/import/noble.qcow2")); err == nil {
		t.Fatal("a file that failed its checksum was kept")
	}
	dl.Set("checksum", l.imgSum)
	_, data, _ = l.call("POST", "/nodes/pve/storage/local/download-url", dl)
	if exit, log := l.task(data); exit != "OK" || !strings.Contains(log, "OK, checksum verified") {
		t.Fatalf("download: %q %q", exit, log)
	}
	_, data, _ = l.call("GET", "/nodes/pve/storage/local/content", url.Values{"content": {"import"}})
	if !strings.Contains(string(data), `"volid":"local:import/noble.qcow2"`) {
		t.Fatalf("content: %s", data)
	}
	if code, _, msg := l.call("POST", "/nodes/pve/storage/local/download-url", url.Values{"url": {l.image.URL}, "content": {"import"}, "filename": {"noble.img"}}); code != 400 || !strings.Contains(msg, "Parameter verification failed") {
		t.Errorf("an .img name: %d %s", code, msg)
	}

	code, data, msg = l.call("POST", "/nodes/pve/qemu", createForm("110"))
	if code != 200 {
		t.Fatalf("create: %d %s", code, msg)
	}
	if exit, log := l.task(data); exit != "OK" || !strings.Contains(log, "scsi0: successfully created disk") {
		t.Fatalf("create: %q %q", exit, log)
	}
	_, data, _ = l.call("GET", "/nodes/pve/qemu/110/config", nil)
	var conf map[string]any
	json.Unmarshal(data, &conf)
	if conf["cores"] != float64(2) || !strings.Contains(conf["scsi0"].(string), "size=3584M") || !strings.HasPrefix(conf["sshkeys"].(string), "ssh-ed25519%20AAAA") || conf["digest"] == nil {
		t.Fatalf("config: %v", conf)
	}
	if b, err := os.ReadFile(filepath.Join(l.root, "etc/pve/nodes/pve/qemu-server/110.conf")); err != nil || !strings.Contains(string(b), "tags: mgmtctl") {
		t.Fatalf("qm's file: %s %v", b, err)
	}
	_, data, _ = l.call("POST", "/nodes/pve/qemu", createForm("110"))
	if exit, _ := l.task(data); !strings.Contains(exit, "VM 110 already exists") {
		t.Errorf("a second create: %q", exit)
	}

	_, data, _ = l.call("POST", "/nodes/pve/qemu/110/status/start", nil)
	if exit, _ := l.task(data); exit != "OK" {
		t.Fatalf("start: %q", exit)
	}
	_, data, _ = l.call("GET", "/nodes/pve/qemu/110/status/current", nil)
	if !strings.Contains(string(data), `"status":"running"`) || !strings.Contains(string(data), `"uptime":7`) {
		t.Fatalf("status: %s", data)
	}
	_, data, _ = l.call("GET", "/nodes/pve/qemu/110/agent/file-read", url.Values{"file": {"/etc/ssh/ssh_host_ed25519_key.pub"}})
	if !strings.Contains(string(data), `"content":"ssh-ed25519 AAAA`) {
		t.Fatalf("file-read: %s", data)
	}
	_, data, _ = l.call("PUT", "/nodes/pve/qemu/110/resize", url.Values{"disk": {"scsi0"}, "size": {"1G"}})
	if exit, _ := l.task(data); exit != "shrinking disks is not supported" {
		t.Errorf("shrink: %q", exit)
	}
	_, data, _ = l.call("PUT", "/nodes/pve/qemu/110/resize", url.Values{"disk": {"scsi0"}, "size": {"20G"}})
	if exit, _ := l.task(data); exit != "OK" {
		t.Fatalf("resize: %q", exit)
	}
	_, data, _ = l.call("DELETE", "/nodes/pve/qemu/110", url.Values{"purge": {"1"}})
	if exit, _ := l.task(data); exit != "VM 110 is running - destroy failed" {
		t.Errorf("destroy a running VM: %q", exit)
	}
	_, data, _ = l.call("POST", "/nodes/pve/qemu/110/status/stop", nil)
	l.task(data)
	_, data, _ = l.call("DELETE", "/nodes/pve/qemu/110", url.Values{"purge": {"1"}})
	if exit, _ := l.task(data); exit != "OK" {
		t.Fatalf("destroy: %q", exit)
	}
	if code, _, msg := l.call("GET", "/nodes/pve/qemu/110/config", nil); code != 500 || !strings.Contains(msg, "Configuration file 'nodes/pve/qemu-server/110.conf' does not exist") {
		t.Errorf("config of a destroyed VM: %d %q", code, msg)
	}
}

// TestVMPrivileges: without any one of mgmtctl's privileges, the call
// that needs it answers 403 with upstream's message, and nothing is
// created.
func TestVMPrivileges(t *testing.T) {
	tests := []struct {
		drop, method, path, msg string
	}{
		{"VM.Allocate", "POST", "/nodes/pve/qemu", "Permission check failed (/vms/110, VM.Allocate)"},
		{"VM.Config.CPU", "POST", "/nodes/pve/qemu", "Permission check failed (/vms/110, VM.Config.CPU)"},
		{"VM.Config.HWType", "POST", "/nodes/pve/qemu", "Permission check failed (/vms/110, VM.Config.HWType)"},
		{"SDN.Use", "POST", "/nodes/pve/qemu", "Permission check failed (/sdn/zones/localnetwork/vmbr0/20, SDN.Use)"},
		{"Datastore.AllocateSpace", "POST", "/nodes/pve/qemu", "Permission check failed (/storage/local-lvm, Datastore.AllocateSpace)"},
		{"Datastore.AllocateTemplate", "POST", "/nodes/pve/storage/local/download-url", "Permission check failed (/storage/local, Datastore.AllocateTemplate)"},
		{"Sys.AccessNetwork", "POST", "/nodes/pve/storage/local/download-url", "Permission check failed (/nodes/pve, Sys.AccessNetwork)"},
		{"VM.Audit", "GET", "/nodes/pve/qemu/110/config", "Permission check failed (/vms/110, VM.Audit)"},
	}
	for _, tt := range tests {
		t.Run(tt.drop, func(t *testing.T) {
			var keep []string
			for _, p := range mgmtctlPrivs {
				if p != tt.drop {
					keep = append(keep, p)
				}
			}
			l := newAPILab(t, strings.Join(keep, ","))
			os.MkdirAll(filepath.Join(l.root, "var/lib/vz/import"), 0o755)
			os.WriteFile(filepath.Join(l.root, "var/lib/vz/import/noble.qcow2"), []byte("QFI\xfb"), 0o644)
			form := createForm("110")
			if strings.Contains(tt.path, "download-url") {
				form = url.Values{"url": {l.image.URL}, "content": {"import"}, "filename": {"x.qcow2"}}
			}
			code, _, msg := l.call(tt.method, tt.path, form)
			if code != 403 || strings.TrimSpace(msg) != tt.msg {
				t.Errorf("%d %q, want 403 %q", code, msg, tt.msg)
			}
			if _, err := os.Stat(filepath.Join(l.root, "etc/pve/nodes/pve/qemu-server/110.conf")); err == nil {
				t.Error("a VM was created")
			}
		})
	}
}

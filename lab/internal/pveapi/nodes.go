package pveapi

// The VM's life through the API, under /nodes/{node}: what mgmtctl's vm
// phase does in its API mode. Each handler checks the privileges upstream
// checks (cited with each), then runs the same code the lab's qm runs, as
// upstream's qm runs the API's own handlers: a VM created here is the VM
// qm sees. Handlers that fork a worker upstream answer with its UPID; the
// task's log and status are under /nodes/{node}/tasks/{upid}.
//
// A path naming another node of the cluster is proxied to it, as
// pve-http-server does for a handler with `proxyto => 'node'`.

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mgmtctl/mgmtctl/lab/internal/qm"
)

// nodeAPI is one node's handlers.
type nodeAPI struct {
	s      *Server
	caller string
	cfg    *UserConfig
	w      http.ResponseWriter
	r      *http.Request
}

// permErr is RPCEnvironment's raise_perm_exc: 403 "Permission check
// failed (<path>, <privs>)".
type permErr struct{ path, privs string }

func (e *permErr) Error() string { return "Permission check failed (" + e.path + ", " + e.privs + ")" }

// check is RPCEnvironment::check_full: every privilege of privs on path,
// or (any) one of them.
func (a *nodeAPI) check(path string, privs []string, any bool) error {
	have := a.cfg.Permissions(LabMajor, a.caller, path)
	if any {
		for _, p := range privs {
			if _, ok := have[p]; ok {
				return nil
			}
		}
		return &permErr{path, strings.Join(privs, "|")}
	}
	for _, p := range privs {
		if _, ok := have[p]; !ok {
			return &permErr{path, p}
		}
	}
	return nil
}

// paramErr is a 400: the message, and the parameter's error.
type paramErr struct{ key, msg string }

func (e *paramErr) Error() string { return "Parameter verification failed." }

// fail answers err as pve-http-server does: a permission error 403, a
// parameter error 400 with its "errors", anything else 500.
func (a *nodeAPI) fail(err error) {
	var pe *permErr
	var pa *paramErr
	switch {
	case errors.As(err, &pe):
		writeError(a.w, http.StatusForbidden, pe.Error())
	case errors.As(err, &pa):
		a.w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		a.w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(a.w).Encode(map[string]any{"data": nil, "message": pa.Error() + "\n", "errors": map[string]string{pa.key: pa.msg}})
	default:
		writeError(a.w, http.StatusInternalServerError, err.Error())
	}
}

// answer is data, or err as the lab's qm words it: "400 Parameter
// verification failed.\n<param>: <msg>" a 400 with its parameter's error.
func (a *nodeAPI) answer(data map[string]any, err error) {
	if err == nil {
		a.ok(data)
		return
	}
	if rest, ok := strings.CutPrefix(err.Error(), "400 Parameter verification failed.\n"); ok {
		k, msg, _ := strings.Cut(rest, ": ")
		a.fail(&paramErr{k, msg})
		return
	}
	a.fail(err)
}

func (a *nodeAPI) ok(data any) {
	a.w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	_ = json.NewEncoder(a.w).Encode(map[string]any{"data": data})
}

// routeNode serves /api2/json/nodes/{node}/rest.
func (s *Server) routeNode(w http.ResponseWriter, r *http.Request, caller string, node string, rest []string) {
	if node != s.Node {
		s.proxy(w, r, node)
		return
	}
	cfg, err := ReadUserConfig(s.Access.UserCfg)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	a := &nodeAPI{s: s, caller: caller, cfg: cfg, w: w, r: r}
	route := r.Method + " " + strings.Join(rest, "/")
	var vmid int
	if len(rest) >= 2 && rest[0] == "qemu" {
		id, err := strconv.Atoi(rest[1])
		if err != nil || id < 100 {
			a.fail(&paramErr{"vmid", "invalid format - value must be an integer from 100 to 999999999"})
			return
		}
		vmid = id
		route = r.Method + " qemu/{vmid}/" + strings.Join(rest[2:], "/")
	}
	if len(rest) >= 2 && rest[0] == "storage" {
		route = r.Method + " storage/{storage}/" + strings.Join(rest[2:], "/")
	}
	if len(rest) == 2 && rest[0] == "network" {
		route = r.Method + " network/{iface}"
	}
	if len(rest) >= 2 && rest[0] == "tasks" {
		route = r.Method + " tasks/{upid}/" + strings.Join(rest[2:], "/")
	}
	switch route {
	case "POST qemu":
		a.create()
	case "GET qemu/{vmid}/config":
		a.config(vmid)
	case "GET qemu/{vmid}/status/current":
		a.status(vmid)
	case "POST qemu/{vmid}/status/start", "POST qemu/{vmid}/status/stop", "POST qemu/{vmid}/status/reset":
		a.power(vmid, rest[3])
	case "PUT qemu/{vmid}/resize":
		a.resize(vmid)
	case "DELETE qemu/{vmid}/":
		a.destroy(vmid)
	case "GET qemu/{vmid}/agent/file-read":
		a.fileRead(vmid)
	case "GET storage/{storage}/content":
		a.content(rest[1])
	case "GET storage/{storage}/status":
		// pve-storage read_status: Datastore.Audit or
		// Datastore.AllocateSpace on /storage/{storage}.
		if err := a.check("/storage/"+rest[1], []string{"Datastore.Audit", "Datastore.AllocateSpace"}, true); err != nil {
			a.fail(err)
			return
		}
		a.answer(a.qm(io.Discard).StorageStatus(rest[1]))
	case "GET network/{iface}":
		// pve-manager network_config: Sys.Audit on /nodes/{node}.
		if err := a.check("/nodes/"+s.Node, []string{"Sys.Audit"}, false); err != nil {
			a.fail(err)
			return
		}
		a.answer(a.qm(io.Discard).Interface(rest[1]))
	case "POST storage/{storage}/download-url":
		a.downloadURL(rest[1])
	case "GET tasks/{upid}/status":
		a.taskStatus(rest[1])
	case "GET tasks/{upid}/log":
		a.taskLog(rest[1])
	default:
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		w.WriteHeader(http.StatusNotImplemented)
		_, _ = w.Write([]byte(`{"data":null,"message":"Method '` + r.Method + ` ` + r.URL.Path + `' not implemented in the lab\n"}`))
	}
}

// resources is GET /cluster/resources?type=vm (pve-manager
// PVE/API2/Cluster.pm resources): the cluster's VMs, each only if the
// caller has VM.Audit on it.
func (s *Server) resources(w http.ResponseWriter, r *http.Request, caller string) {
	if t := r.URL.Query().Get("type"); t != "vm" {
		writeError(w, http.StatusNotImplemented, "the lab answers /cluster/resources only with type=vm")
		return
	}
	cfg, err := ReadUserConfig(s.Access.UserCfg)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	var out, errb strings.Builder
	if code := s.QM(&out, &errb).Resources([]string{"--type", "vm", "--output-format", "json"}); code != 0 {
		writeError(w, http.StatusInternalServerError, strings.TrimSpace(errb.String()))
		return
	}
	var vms []map[string]any
	if err := json.Unmarshal([]byte(out.String()), &vms); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	seen := []map[string]any{}
	for _, vm := range vms {
		if _, ok := cfg.Permissions(LabMajor, caller, fmt.Sprintf("/vms/%v", vm["vmid"]))["VM.Audit"]; ok {
			seen = append(seen, vm)
		}
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	_ = json.NewEncoder(w).Encode(map[string]any{"data": seen})
}

// proxy hands a request for another node to that node's API (by its
// name, as the hosts file resolves it; its certificate is signed by the
// cluster's CA, which every node trusts).
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, node string) {
	if !regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?$`).MatchString(node) {
		writeError(w, http.StatusBadRequest, "Parameter verification failed.")
		return
	}
	target := &url.URL{Scheme: "https", Host: node + ":8006"}
	rp := httputil.NewSingleHostReverseProxy(target)
	if s.Transport != nil {
		rp.Transport = s.Transport
	}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		// pve-http-server's answer when the node does not answer.
		writeError(w, 595, fmt.Sprintf("Connection refused"))
	}
	rp.ServeHTTP(w, r)
}

// qm is the node's qm writing into a task's log.
func (a *nodeAPI) qm(log io.Writer) *qm.Node {
	n := a.s.QM(log, log)
	n.API = true
	return n
}

// vm checks privs on /vms/{vmid} and reads the VM's config; false when
// it answered the request with the error.
func (a *nodeAPI) vm(vmid int, privs ...string) (qm.Config, bool) {
	if err := a.check(fmt.Sprintf("/vms/%d", vmid), privs, false); err != nil {
		a.fail(err)
		return nil, false
	}
	c, err := a.qm(io.Discard).Config(vmid)
	if err != nil {
		a.fail(err)
		return nil, false
	}
	return c, true
}

// config is GET qemu/{vmid}/config (qemu-server src/PVE/API2/Qemu.pm
// vm_config: VM.Audit on /vms/{vmid}): the config with its digest.
func (a *nodeAPI) config(vmid int) {
	c, ok := a.vm(vmid, "VM.Audit")
	if !ok {
		return
	}
	out := map[string]any{}
	for k, v := range c {
		out[k] = jsonValue(k, v)
	}
	sum := sha256.New()
	for _, k := range sortedKeys(c) {
		fmt.Fprintf(sum, "%s: %s\n", k, c[k])
	}
	out["digest"] = hex.EncodeToString(sum.Sum(nil))[:40]
	a.ok(out)
}

// intKeys are the config keys whose schema type is integer: JSON numbers
// in the API's answer, where the rest are strings.
var intKeys = map[string]bool{"cores": true, "sockets": true, "balloon": true, "onboot": true, "template": true}

func jsonValue(k, v string) any {
	if intKeys[k] {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return v
}

// status is GET qemu/{vmid}/status/current (vm_status: VM.Audit).
func (a *nodeAPI) status(vmid int) {
	c, ok := a.vm(vmid, "VM.Audit")
	if !ok {
		return
	}
	st, err := a.qm(io.Discard).VMStatus(vmid, c)
	if err != nil {
		a.fail(err)
		return
	}
	// The API's full status adds these to qm's keys.
	st["ha"] = map[string]any{"managed": 0}
	if _, ok := st["qmpstatus"]; !ok {
		st["qmpstatus"] = "stopped"
	}
	if c["agent"] != "" {
		st["agent"] = 1
	}
	if c["tags"] != "" {
		st["tags"] = c["tags"]
	}
	a.ok(st)
}

// vmOptionPrivs is check_vm_modify_config_perm's table (Qemu.pm), for
// the options the lab takes: the privilege an option needs on
// /vms/{vmid}, two meaning either.
func vmOptionPrivs(key string) []string {
	switch {
	case key == "cores" || key == "sockets" || key == "cpu":
		return []string{"VM.Config.CPU"}
	case key == "memory" || key == "balloon":
		return []string{"VM.Config.Memory"}
	case key == "scsihw" || key == "vga" || key == "machine" || key == "bios" || regexp.MustCompile(`^serial\d+$`).MatchString(key):
		return []string{"VM.Config.HWType"} // a socket serial: check_vm_create_serial_perm
	case key == "name" || key == "agent" || key == "onboot" || key == "ostype" || key == "description" || key == "tags":
		return []string{"VM.Config.Options"} // tags: assert_tag_permissions, in the default 'free' mode
	case key == "boot" || key == "bootdisk":
		return []string{"VM.Config.Disk"}
	case regexp.MustCompile(`^net\d+$`).MatchString(key):
		return []string{"VM.Config.Network"}
	case regexp.MustCompile(`^ipconfig\d+$`).MatchString(key) || key == "ciuser" || key == "sshkeys" || key == "nameserver" ||
		key == "searchdomain" || key == "cipassword":
		return []string{"VM.Config.Cloudinit", "VM.Config.Network"}
	}
	return nil
}

var (
	newDiskRE = regexp.MustCompile(`^(([^/:\s]+):)?(\d+(\.\d+)?)$`)
	driveRE   = regexp.MustCompile(`^(ide[0-3]|sata[0-5]|scsi([0-9]|[12][0-9]|30)|virtio([0-9]|1[0-5])|efidisk0|tpmstate0)$`)
)

// create is POST qemu (create_vm): VM.Allocate on /vms/{vmid}, each
// option's privilege (check_vm_modify_config_perm), Datastore.AllocateSpace
// on a new disk's storage and read access to an import-from volume's
// (check_storage_access, pve-storage check_volume_access), SDN.Use on a
// NIC's bridge (PVE::GuestHelpers check_vnet_access:
// /sdn/zones/localnetwork/<bridge>[/<tag>]). Then, in a worker, what qm
// create does.
func (a *nodeAPI) create() {
	form := a.r.PostForm
	vmid, err := strconv.Atoi(form.Get("vmid"))
	if err != nil || vmid < 100 {
		a.fail(&paramErr{"vmid", "invalid format - value must be an integer from 100 to 999999999"})
		return
	}
	vmPath := fmt.Sprintf("/vms/%d", vmid)
	if err := a.check(vmPath, []string{"VM.Allocate"}, false); err != nil {
		a.fail(err)
		return
	}
	keys := sortedKeys(form)
	args := []string{"create", strconv.Itoa(vmid)}
	for _, k := range keys {
		if k == "vmid" {
			continue
		}
		v := form.Get(k)
		if privs := vmOptionPrivs(k); privs != nil {
			if err := a.check(vmPath, privs, len(privs) > 1); err != nil {
				a.fail(err)
				return
			}
		}
		if driveRE.MatchString(k) {
			if err := a.checkDrive(vmid, k, v); err != nil {
				a.fail(err)
				return
			}
		}
		if regexp.MustCompile(`^net\d+$`).MatchString(k) {
			if err := a.checkBridge(v); err != nil {
				a.fail(err)
				return
			}
		}
		args = append(args, "--"+k, v)
	}
	a.worker("qmcreate", strconv.Itoa(vmid), false, func(log io.Writer) error {
		return a.run(log, args)
	})
}

func (a *nodeAPI) checkDrive(vmid int, key, val string) error {
	vol, opts, _ := strings.Cut(val, ",")
	st, name, _ := strings.Cut(vol, ":")
	if name == "cloudinit" {
		return nil // check_storage_access: nothing to check
	}
	if m := newDiskRE.FindStringSubmatch(vol); m != nil {
		if err := a.check("/storage/"+st, []string{"Datastore.AllocateSpace"}, false); err != nil {
			return err
		}
	}
	for _, o := range strings.Split(opts, ",") {
		if src, ok := strings.CutPrefix(o, "import-from="); ok {
			sid, _, isVol := strings.Cut(src, ":")
			// pve-storage src/PVE/Storage.pm check_volume_access.
			if !isVol || strings.HasPrefix(src, "/") {
				if a.caller != "root@pam" {
					return errors.New("Only root can pass arbitrary filesystem paths.")
				}
				continue
			}
			if a.check("/storage/"+sid, []string{"Datastore.Allocate"}, false) == nil {
				continue
			}
			if err := a.check("/storage/"+sid, []string{"Datastore.AllocateSpace", "Datastore.Audit"}, true); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *nodeAPI) checkBridge(net string) error {
	var bridge, tag string
	for _, o := range strings.Split(net, ",") {
		if v, ok := strings.CutPrefix(o, "bridge="); ok {
			bridge = v
		}
		if v, ok := strings.CutPrefix(o, "tag="); ok {
			tag = v
		}
	}
	if bridge == "" {
		return nil
	}
	p := "/sdn/zones/localnetwork/" + bridge
	if tag != "" {
		p += "/" + tag
	}
	return a.check(p, []string{"SDN.Use"}, false)
}

// run runs qm args with its output in the task's log; a non-zero exit,
// or a message on stderr from a command that exits 0 after its worker
// failed (resize: docs/upstream.md §1.3), is the task's error: its last
// line.
func (a *nodeAPI) run(log io.Writer, args []string) error {
	var errBuf strings.Builder
	n := a.s.QM(log, io.MultiWriter(log, &errBuf))
	n.API = true
	code := n.QM(args)
	msg := strings.TrimSpace(errBuf.String())
	if code == 0 && msg == "" {
		return nil
	}
	lines := strings.Split(msg, "\n")
	if strings.HasPrefix(msg, "400 Parameter verification failed.") && len(lines) > 1 {
		lines = lines[1:2]
	}
	if msg == "" {
		return fmt.Errorf("command 'qm %s' failed: exit code %d", args[0], code)
	}
	return errors.New(lines[len(lines)-1])
}

// power is POST qemu/{vmid}/status/{start,stop,reset} (vm_start, vm_stop,
// vm_reset: VM.PowerMgmt on /vms/{vmid}; workers qmstart, qmstop,
// qmreset).
func (a *nodeAPI) power(vmid int, op string) {
	if _, ok := a.vm(vmid, "VM.PowerMgmt"); !ok {
		return
	}
	a.worker("qm"+op, strconv.Itoa(vmid), false, func(log io.Writer) error {
		return a.run(log, []string{op, strconv.Itoa(vmid)})
	})
}

// resize is PUT qemu/{vmid}/resize (resize_vm: VM.Config.Disk on
// /vms/{vmid}, Datastore.AllocateSpace on the disk's storage; worker
// "resize" since qemu-server 8.1).
func (a *nodeAPI) resize(vmid int) {
	disk, size := a.r.PostForm.Get("disk"), a.r.PostForm.Get("size")
	c, ok := a.vm(vmid, "VM.Config.Disk")
	if !ok {
		return
	}
	if st, _, ok := strings.Cut(c[disk], ":"); ok {
		if err := a.check("/storage/"+st, []string{"Datastore.AllocateSpace"}, false); err != nil {
			a.fail(err)
			return
		}
	}
	a.worker("resize", strconv.Itoa(vmid), false, func(log io.Writer) error {
		return a.run(log, []string{"resize", strconv.Itoa(vmid), disk, size})
	})
}

// destroy is DELETE qemu/{vmid} (destroy_vm: VM.Allocate; worker
// qmdestroy). A running VM is refused in the worker.
func (a *nodeAPI) destroy(vmid int) {
	if _, ok := a.vm(vmid, "VM.Allocate"); !ok {
		return
	}
	a.worker("qmdestroy", strconv.Itoa(vmid), false, func(log io.Writer) error {
		return a.run(log, []string{"destroy", strconv.Itoa(vmid)})
	})
}

// fileRead is GET qemu/{vmid}/agent/file-read (Agent.pm file-read:
// VM.GuestAgent.FileRead or VM.GuestAgent.Unrestricted on /vms/{vmid} in
// PVE 9; VM.Monitor in PVE 8): {"content": ...}.
func (a *nodeAPI) fileRead(vmid int) {
	privs, anyOf := []string{"VM.GuestAgent.FileRead", "VM.GuestAgent.Unrestricted"}, true
	if LabMajor < 9 {
		privs, anyOf = []string{"VM.Monitor"}, false
	}
	if err := a.check(fmt.Sprintf("/vms/%d", vmid), privs, anyOf); err != nil {
		a.fail(err)
		return
	}
	out, err := a.qm(io.Discard).FileRead(vmid, a.r.Form.Get("file"))
	if err != nil {
		a.fail(err)
		return
	}
	a.ok(map[string]any{"content": out})
}

// content is GET storage/{storage}/content (pve-storage
// src/PVE/API2/Storage/Content.pm index: Datastore.Audit or
// Datastore.AllocateSpace on /storage/{storage}): the volumes, of one
// content type when asked.
func (a *nodeAPI) content(storage string) {
	if err := a.check("/storage/"+storage, []string{"Datastore.Audit", "Datastore.AllocateSpace"}, true); err != nil {
		a.fail(err)
		return
	}
	st, ok := a.qm(io.Discard).Storages()[storage]
	if !ok {
		a.fail(fmt.Errorf("storage '%s' does not exist", storage))
		return
	}
	want := a.r.Form.Get("content")
	out := []map[string]any{}
	if st.Path != "" && (want == "" || want == "import") && st.Content["import"] {
		dir := filepath.Join(a.s.root(), st.Path, "import")
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			m := regexp.MustCompile(`\.(ova|ovf|qcow2|raw|vmdk)$`).FindStringSubmatch(e.Name())
			if m == nil || !e.Type().IsRegular() {
				continue
			}
			fi, err := e.Info()
			if err != nil {
				continue
			}
			out = append(out, map[string]any{"volid": storage + ":import/" + e.Name(), "content": "import",
				"format": m[1], "size": fi.Size(), "ctime": fi.ModTime().Unix()})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["volid"].(string) < out[j]["volid"].(string) })
	a.ok(out)
}

var uploadImportName = regexp.MustCompile(`[a-zA-Z0-9\-\.\+\=\_]+\.(ova|qcow2|raw|vmdk)$`)

// downloadURL is POST storage/{storage}/download-url (pve-storage
// src/PVE/API2/Storage/Status.pm download_url, v9.1.7): Datastore.
// AllocateTemplate on /storage/{storage}, and Sys.Audit with Sys.Modify
// on / or Sys.AccessNetwork on /nodes/{node}; content 'import' takes a
// name ending in .ova, .qcow2, .raw or .vmdk (UPLOAD_IMPORT_EXT_RE_1, since
// 8.3.6: PVE 8.4); the file is fetched beside its final name, its checksum
// checked, and only then renamed (pve-common PVE::Tools
// download_file_from_url, whose lines the task log shows).
func (a *nodeAPI) downloadURL(storage string) {
	f := a.r.PostForm
	if err := a.check("/storage/"+storage, []string{"Datastore.AllocateTemplate"}, false); err != nil {
		a.fail(err)
		return
	}
	if a.check("/", []string{"Sys.Audit", "Sys.Modify"}, false) != nil {
		if err := a.check("/nodes/"+a.s.Node, []string{"Sys.AccessNetwork"}, false); err != nil {
			a.fail(err)
			return
		}
	}
	src, content, name := f.Get("url"), f.Get("content"), f.Get("filename")
	if !regexp.MustCompile(`^https?://`).MatchString(src) {
		a.fail(&paramErr{"url", "value does not match the regex pattern"})
		return
	}
	st, ok := a.qm(io.Discard).Storages()[storage]
	if !ok {
		a.fail(fmt.Errorf("storage '%s' does not exist", storage))
		return
	}
	if st.Path == "" {
		a.fail(fmt.Errorf("can't upload to storage type '%s', not a file based storage!", st.Type))
		return
	}
	if !st.Content[content] {
		a.fail(fmt.Errorf("storage '%s' is not configured for content-type '%s'", storage, content))
		return
	}
	name = regexp.MustCompile(`[^a-zA-Z0-9_.-]`).ReplaceAllString(filepath.Base(name), "_")
	if content != "import" {
		a.fail(&paramErr{"content", "the lab downloads only 'import' content"})
		return
	}
	if !uploadImportName.MatchString(name) {
		a.fail(&paramErr{"filename", "invalid filename or wrong extension"})
		return
	}
	sum, algo := f.Get("checksum"), f.Get("checksum-algorithm")
	if (sum == "") != (algo == "") {
		a.fail(&paramErr{"checksum", "parameter 'checksum-algorithm' is required with 'checksum'"})
		return
	}
	dest := filepath.Join(a.s.root(), st.Path, "import", name)
	a.worker("download", name, true, func(log io.Writer) error {
		return a.s.download(log, src, dest, algo, sum)
	})
}

func (s *Server) download(log io.Writer, src, dest, algo, want string) error {
	fmt.Fprintf(log, "downloading %s to %s\n", src, strings.TrimPrefix(dest, strings.TrimSuffix(s.root(), "/")))
	if _, err := os.Stat(dest); err == nil {
		if algo != "" {
			fmt.Fprint(log, "calculating checksum of existing file...")
			got, err := fileHash(algo, dest)
			if err != nil {
				return err
			}
			if strings.EqualFold(got, want) {
				fmt.Fprint(log, "OK, got correct file already, no need to download\n")
				return nil
			}
			fmt.Fprint(log, "\n")
			return fmt.Errorf("checksum mismatch: got '%s' != expect '%s', aborting", got, want)
		}
		return fmt.Errorf("refusing to override existing file '%s'", dest)
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.tmp_dwnl.%d", dest, os.Getpid())
	defer os.Remove(tmp)
	if err := s.fetch(src, tmp); err != nil {
		return fmt.Errorf("download failed: %v", err)
	}
	if algo != "" {
		fmt.Fprint(log, "calculating checksum...")
		got, err := fileHash(algo, tmp)
		if err != nil {
			return err
		}
		if !strings.EqualFold(got, want) {
			fmt.Fprint(log, "\n")
			return fmt.Errorf("checksum mismatch: got '%s' != expect '%s'", got, want)
		}
		fmt.Fprint(log, "OK, checksum verified\n")
	}
	fmt.Fprintf(log, "download of '%s' to '%s' finished\n", src, strings.TrimPrefix(dest, strings.TrimSuffix(s.root(), "/")))
	return os.Rename(tmp, dest)
}

// fetch is wget's part: the URL to a file, the certificate verified.
func (s *Server) fetch(src, dst string) error {
	c := &http.Client{Timeout: 5 * time.Minute}
	if s.Transport != nil {
		c.Transport = s.Transport
	}
	resp, err := c.Get(src)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("server returned %s", resp.Status)
	}
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func fileHash(algo, path string) (string, error) {
	var h hash.Hash
	switch algo {
	case "sha256":
		h = sha256.New()
	case "sha512":
		h = sha512.New()
	default:
		return "", fmt.Errorf("the lab checks sha256 and sha512 only, not %s", algo)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (s *Server) root() string {
	if s.Root == "" {
		return "/"
	}
	return s.Root
}

// task is one worker: its UPID, its log lines and, once it stopped, its
// exit status ("OK", or the error's message).
type task struct {
	upid, typ, id, user string
	start               time.Time
	mu                  sync.Mutex
	log                 []byte
	done                bool
	exit                string
}

func (t *task) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.log = append(t.log, p...)
	return len(p), nil
}

var taskSeq struct {
	sync.Mutex
	n int
}

// worker is RPCEnvironment::fork_worker: a UPID
// (UPID:$node:$pid:$pstart:$starttime:$type:$id:$user:, pve-common
// src/PVE/UPID.pm encode), the work in the background (async) or at
// once, its log ending in "TASK OK" or "TASK ERROR: <message>".
func (a *nodeAPI) worker(typ, id string, async bool, work func(io.Writer) error) {
	taskSeq.Lock()
	taskSeq.n++
	pid := os.Getpid()*16 + taskSeq.n
	taskSeq.Unlock()
	now := time.Now()
	t := &task{typ: typ, id: id, user: a.caller, start: now}
	t.upid = fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", a.s.Node, pid&0xffffffff, pid*7&0xffffffff, now.Unix(), typ, id, a.caller)
	a.s.tasks.Store(t.upid, t)
	run := func() {
		err := work(t)
		t.mu.Lock()
		defer t.mu.Unlock()
		if len(t.log) > 0 && t.log[len(t.log)-1] != '\n' {
			t.log = append(t.log, '\n')
		}
		t.exit = "OK"
		if err != nil {
			t.exit = strings.TrimSpace(err.Error())
			t.log = append(t.log, "TASK ERROR: "+t.exit+"\n"...)
		} else {
			t.log = append(t.log, "TASK OK\n"...)
		}
		t.done = true
	}
	if async {
		go run()
	} else {
		run()
	}
	a.ok(t.upid)
}

func (a *nodeAPI) task(upid string) (*task, bool) {
	v, ok := a.s.tasks.Load(upid)
	if !ok {
		// pve-manager PVE/API2/Tasks.pm: upid_decode, then the log file.
		a.fail(fmt.Errorf("no such task"))
		return nil, false
	}
	t := v.(*task)
	// A user reads their own tasks (a token its own); others need
	// Sys.Audit on /nodes/{node}.
	if t.user != a.caller {
		if err := a.check("/nodes/"+a.s.Node, []string{"Sys.Audit"}, false); err != nil {
			a.fail(err)
			return nil, false
		}
	}
	return t, true
}

// taskStatus is GET tasks/{upid}/status (pve-manager PVE/API2/Tasks.pm
// read_task_status).
func (a *nodeAPI) taskStatus(upid string) {
	t, ok := a.task(upid)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	st := map[string]any{"upid": t.upid, "node": a.s.Node, "type": t.typ, "id": t.id, "user": t.user,
		"starttime": t.start.Unix(), "status": "running"}
	if t.done {
		st["status"], st["exitstatus"] = "stopped", t.exit
	}
	a.ok(st)
}

// taskLog is GET tasks/{upid}/log (read_task_log): lines from start
// (0-based), at most limit (50 by default), each {"n": <1-based>, "t":
// text}, and "total".
func (a *nodeAPI) taskLog(upid string) {
	t, ok := a.task(upid)
	if !ok {
		return
	}
	start, _ := strconv.Atoi(a.r.Form.Get("start"))
	limit := 50
	if l, err := strconv.Atoi(a.r.Form.Get("limit")); err == nil && l > 0 {
		limit = l
	}
	t.mu.Lock()
	lines := strings.Split(strings.TrimSuffix(string(t.log), "\n"), "\n")
	t.mu.Unlock()
	if len(lines) == 1 && lines[0] == "" {
		lines = nil
	}
	out := []map[string]any{}
	for i := start; i < len(lines) && len(out) < limit; i++ {
		out = append(out, map[string]any{"n": i + 1, "t": lines[i]})
	}
	a.w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	_ = json.NewEncoder(a.w).Encode(map[string]any{"data": out, "total": len(lines)})
}

package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mgmtctl/mgmtctl/lab/internal/host"
)

// BootDelay is how long a VM takes from `qm start` to its namespace.
const BootDelay = 1 * time.Second

// daemon owns the lab's hosts while the lab is up.
type daemon struct {
	l   *Lab
	log *log.Logger

	mu     sync.Mutex
	agents map[string]*exec.Cmd // host name -> agent
	vms    map[int]*vm
	stop   chan struct{}
	down   sync.Once
}

type vm struct {
	info    VMInfo
	started time.Time // when its QEMU started (qm status's uptime)
	agent   *exec.Cmd
	// cancel stops a boot still waiting out its delay.
	cancel context.CancelFunc
	// settled is closed when the boot ends, up or failed.
	settled chan struct{}
}

// RunDaemon builds the lab's network and base hosts, reports READY on
// ready, and serves the control socket until told to stop.
func RunDaemon(l *Lab, ready *os.File) error {
	d := &daemon{l: l, log: log.New(os.Stderr, "labsim: ", log.LstdFlags), agents: map[string]*exec.Cmd{}, vms: map[int]*vm{}, stop: make(chan struct{})}
	if err := os.WriteFile(l.path("daemon.pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	fail := func(err error) error {
		d.teardown()
		if ready != nil {
			fmt.Fprintf(ready, "FAILED %v\n", err)
		}
		return err
	}
	if err := l.Net.Bridge(); err != nil {
		return fail(err)
	}
	base := []ProxmoxNode{{"laptop", LaptopAddr}, {"mirror", MirrorAddr}}
	agents := []string{"mirror"}
	for _, n := range l.Nodes() {
		base = append(base, n)
		agents = append(agents, n.Name)
	}
	for _, h := range base {
		if err := l.Net.AddHost(h.Name, h.Addr, h.Name, ""); err != nil {
			return fail(err)
		}
	}
	for _, name := range agents {
		if err := d.startAgent(name, l.HostDisk(name)+"/spec.json", l.Net.NS(name)); err != nil {
			return fail(err)
		}
	}
	// Upstream's builds still being built (make demo) come into the lab
	// as they are done; an up from the tests has them all already.
	if b, err := os.ReadFile(l.path(BuildsFile)); err == nil {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if err := l.watchBuilds(ctx, strings.TrimSpace(string(b)), d.log.Printf); err != nil {
			d.log.Printf("upstream's builds are not watched: %v", err)
		}
	}
	_ = os.Remove(l.ControlSocket())
	ln, err := net.Listen("unix", l.ControlSocket())
	if err != nil {
		return fail(err)
	}
	if ready != nil {
		fmt.Fprintln(ready, "READY")
		ready.Close()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		select {
		case <-sig:
		case <-d.stop:
		}
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			break
		}
		go d.serve(c)
	}
	d.down.Do(d.teardown)
	return nil
}

// startAgent runs the host agent in the host's namespaces and waits for
// its READY line.
func (d *daemon) startAgent(name, specPath, ns string) error {
	logf, err := os.OpenFile(d.l.HostLog(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		if err := os.MkdirAll(d.l.path("hosts"), 0o755); err != nil {
			return err
		}
		if logf, err = os.OpenFile(d.l.HostLog(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return err
		}
	}
	cmd := exec.Command("ip", "netns", "exec", ns, "unshare", "--mount", "--uts", "--propagation", "private", "--",
		d.l.Binary(), "agent", "--spec", specPath)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "READY" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b, _ := os.ReadFile(d.l.HostLog(name))
		return fmt.Errorf("host %s did not come up: %s", name, tail(string(b)))
	}
	d.mu.Lock()
	d.agents[name] = cmd
	d.mu.Unlock()
	return nil
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

func (d *daemon) teardown() {
	d.mu.Lock()
	for id, v := range d.vms {
		d.haltLocked(id, v)
	}
	for _, a := range d.agents {
		_ = a.Process.Signal(syscall.SIGTERM)
	}
	agents := d.agents
	d.agents = map[string]*exec.Cmd{}
	d.mu.Unlock()
	for _, a := range agents {
		done := make(chan struct{})
		go func() { _ = a.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = a.Process.Kill()
		}
	}
	if err := d.l.Net.Destroy(); err != nil {
		d.log.Printf("destroy network: %v", err)
	}
	_ = os.Remove(d.l.ControlSocket())
	_ = os.Remove(d.l.path("daemon.pid"))
}

func (d *daemon) serve(c net.Conn) {
	defer c.Close()
	var req Request
	if err := json.NewDecoder(c).Decode(&req); err != nil {
		return
	}
	if req.Op == "stop" {
		// Answer only once everything is gone, so `labsim down` returns
		// to a clean machine.
		d.down.Do(d.teardown)
		_ = json.NewEncoder(c).Encode(Response{OK: true})
		close(d.stop)
		return
	}
	if req.Op == "wait-vm" {
		// For tests and tools: block until the VM's boot has ended.
		d.mu.Lock()
		v := d.vms[req.VMID]
		d.mu.Unlock()
		if v == nil {
			_ = json.NewEncoder(c).Encode(Response{Error: fmt.Sprintf("VM %d is not running", req.VMID)})
			return
		}
		<-v.settled
		d.mu.Lock()
		st := v.info.State
		d.mu.Unlock()
		_ = json.NewEncoder(c).Encode(Response{OK: st == "up", Error: map[bool]string{false: "VM boot " + st}[st == "up"]})
		return
	}
	_ = json.NewEncoder(c).Encode(d.handle(req))
}

func (d *daemon) handle(req Request) Response {
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.vms[req.VMID]
	switch req.Op {
	case "ping":
		return Response{OK: true}
	case "boot":
		if v != nil {
			return Response{Error: fmt.Sprintf("VM %d already running", req.VMID)}
		}
		return d.bootLocked(req.VMID, req.Conf)
	case "halt":
		if v != nil {
			d.haltLocked(req.VMID, v)
		}
		return Response{OK: true}
	case "running":
		return Response{OK: true, Bool: v != nil}
	case "uptime":
		if v == nil {
			return Response{Error: fmt.Sprintf("VM %d not running", req.VMID)}
		}
		return Response{OK: true, Code: int(time.Since(v.started).Seconds())}
	case "guest-up":
		return Response{OK: true, Bool: v != nil && v.info.State == "up"}
	case "destroyed":
		_ = os.RemoveAll(d.l.VMDisk(req.VMID))
		return Response{OK: true}
	case "agent":
		return Response{OK: true, Bool: v != nil && v.info.State == "up" && d.guestAgentUp(req.VMID)}
	case "exec":
		if v == nil || v.agent == nil {
			return Response{Error: "VM is not running"}
		}
		return d.execLocked(v, req.Argv)
	case "list":
		var out []VMInfo
		for _, v := range d.vms {
			out = append(out, v.info)
		}
		return Response{OK: true, VMs: out}
	}
	return Response{Error: "unknown op " + req.Op}
}

// guestAgentUp reads the VM's unit state from its disk: the simulated
// systemctl records running units there.
func (d *daemon) guestAgentUp(vmid int) bool {
	_, err := os.Stat(d.l.VMDisk(vmid) + "/upper/var/lib/labsim/units/qemu-guest-agent.service.active")
	return err == nil
}

func (d *daemon) execLocked(v *vm, argv []string) Response {
	if len(argv) == 0 {
		return Response{Error: "no command"}
	}
	args := append([]string{"-t", strconv.Itoa(v.agent.Process.Pid), "-m", "-u", "-n", "--"}, argv...)
	cmd := exec.Command("nsenter", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		return Response{Error: err.Error()}
	}
	return Response{OK: true, Stdout: out.String(), Stderr: errb.String(), Code: code}
}

// vmSpec turns a qm config into the VM host's spec, as cloud-init reads
// the NoCloud drive qm generates from it.
func (d *daemon) vmSpec(vmid int, conf map[string]string) (*host.Spec, error) {
	ip := ""
	for _, p := range strings.Split(conf["ipconfig0"], ",") {
		if v, ok := strings.CutPrefix(p, "ip="); ok {
			ip, _, _ = strings.Cut(v, "/")
		}
	}
	if ip == "" || ip == "dhcp" {
		return nil, fmt.Errorf("the lab has no DHCP: set ipconfig0 ip=<addr>/24")
	}
	keys, err := url.PathUnescape(conf["sshkeys"])
	if err != nil {
		return nil, err
	}
	user := conf["ciuser"]
	if user == "" {
		user = "ubuntu" // the image's default user
	}
	name := conf["name"]
	if name == "" {
		name = fmt.Sprintf("VM%d", vmid)
	}
	ns := conf["nameserver"]
	resolv := ""
	for _, s := range strings.Fields(ns) {
		resolv += "nameserver " + s + "\n"
	}
	mac := ""
	if m := strings.Split(conf["net0"], ",")[0]; strings.Contains(m, "=") {
		mac = strings.SplitN(m, "=", 2)[1]
	}
	delay := 1500 * time.Millisecond
	hosts := map[string]string{}
	for _, n := range MirrorNames {
		hosts[n] = MirrorAddr
	}
	nodes := d.l.Nodes()
	for _, n := range nodes {
		hosts[n.Name] = n.Addr
	}
	return &host.Spec{
		Name: fmt.Sprintf("vm%d", vmid), Hostname: name, Addr: ip, Disk: d.l.VMDisk(vmid), LabDir: d.l.Dir,
		Overlays: []string{"/etc", "/root", "/home", "/var", "/usr", "/opt", "/srv"},
		Users:    []host.User{{Name: user, Sudo: true, AuthorizedKeys: keys}},
		Hosts:    hosts,
		CACert:   d.caPEM(),
		Files: map[string]host.File{
			"/etc/resolv.conf":     {Content: resolv, Mode: 0o644},
			"/etc/labsim/lab.json": {Content: fmt.Sprintf("{\"dir\":%q,\"node\":%q}\n", d.l.Dir, nodes[0].Name), Mode: 0o644},
		},
		Links: map[string]string{
			"/usr/local/bin/cloud-init": host.SimBinary, "/usr/local/bin/apt-get": host.SimBinary,
			"/usr/local/bin/apt": host.SimBinary, "/usr/local/bin/dpkg-query": host.SimBinary,
			"/usr/local/bin/systemctl": host.SimBinary,
		},
		HostKeyOut: d.l.VMDisk(vmid) + "/ssh_host_ed25519_key.pub",
		Role:       "vm", CloudInitDelay: delay, MAC: mac,
	}, nil
}

func (d *daemon) caPEM() string {
	b, _ := os.ReadFile(d.l.path("pki", "ca.crt"))
	return string(b)
}

func (d *daemon) bootLocked(vmid int, conf map[string]string) Response {
	spec, err := d.vmSpec(vmid, conf)
	if err != nil {
		return Response{Error: err.Error()}
	}
	ctx, cancel := context.WithCancel(context.Background())
	v := &vm{info: VMInfo{VMID: vmid, Name: spec.Hostname, Addr: spec.Addr, State: "booting"}, started: time.Now(), cancel: cancel, settled: make(chan struct{})}
	d.vms[vmid] = v
	delay := BootDelay
	if s, err := os.ReadFile(d.l.FaultPath("slow-boot")); err == nil {
		if secs, err := strconv.Atoi(strings.TrimSpace(string(s))); err == nil {
			delay = time.Duration(secs) * time.Second
		}
	}
	failing := exists(d.l.FaultPath("fail-boot"))
	go func() {
		// QEMU runs at once; the guest takes a while to boot.
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		if failing {
			d.setState(vmid, v, "failed")
			d.log.Printf("VM %d: boot fault: the guest never comes up", vmid)
			return
		}
		if err := d.bootHost(vmid, spec); err != nil {
			d.log.Printf("VM %d: boot failed: %v", vmid, err)
			d.setState(vmid, v, "failed")
			return
		}
	}()
	return Response{OK: true}
}

func (d *daemon) setState(vmid int, v *vm, state string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.vms[vmid] == v {
		v.info.State = state
		close(v.settled)
	}
}

func (d *daemon) bootHost(vmid int, spec *host.Spec) error {
	name := spec.Name
	if err := os.MkdirAll(spec.Disk, 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(spec, "", "  ")
	specPath := spec.Disk + "/spec.json"
	if err := os.WriteFile(specPath, b, 0o644); err != nil {
		return err
	}
	if err := d.l.Net.AddHost(name, spec.Addr, name, spec.MAC); err != nil {
		return err
	}
	if err := d.startAgent(name, specPath, d.l.Net.NS(name)); err != nil {
		_ = d.l.Net.RemoveHost(name)
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.vms[vmid]
	if v == nil { // stopped while booting
		a := d.agents[name]
		delete(d.agents, name)
		go func() { _ = a.Process.Kill(); _ = a.Wait(); _ = d.l.Net.RemoveHost(name) }()
		return nil
	}
	v.agent = d.agents[name]
	v.info.State = "up"
	close(v.settled)
	return nil
}

// haltLocked powers a VM off: its processes die with its namespace; its
// disk stays.
func (d *daemon) haltLocked(vmid int, v *vm) {
	v.cancel()
	name := fmt.Sprintf("vm%d", vmid)
	if a := d.agents[name]; a != nil {
		_ = a.Process.Kill()
		_ = a.Wait()
		delete(d.agents, name)
	}
	_ = d.l.Net.RemoveHost(name)
	delete(d.vms, vmid)
}

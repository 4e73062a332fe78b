package lab

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ExecArgv is the command line that runs argv in the laptop namespace with
// the lab's laptop home, or, with host set, inside that host's network,
// mount and UTS namespaces (to look at it the way it looks at itself).
func (l *Lab) ExecArgv(hostName string, argv []string) ([]string, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("no command given")
	}
	if hostName == "" || hostName == "laptop" {
		env := []string{"env", "HOME=" + l.LaptopHome(), "USER=" + userName(), "SSH_AUTH_SOCK=", "SSL_CERT_FILE=" + l.CABundle()}
		// OpenSSH takes ~/.ssh from the passwd entry, not $HOME: in a
		// mount namespace of its own, the laptop home's .ssh is bound over
		// the user's, so a plain `ssh` uses the laptop's key and
		// known_hosts. Nothing of it is seen outside that namespace.
		// The laptop's resolver knows the internet's names as the
		// mirror's (LaptopHosts), as every host of the lab does, so a
		// tool on the laptop (clusterctl) reaches "github.com".
		bind := []string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
			`mkdir -p -m 700 "$1" && mount --bind "$2" "$1" && { [ ! -f "$3" ] || mount --bind "$3" /etc/hosts; } && shift 3 && exec "$@"`, "sh",
			filepath.Join(passwdHome(), ".ssh"), filepath.Join(l.LaptopHome(), ".ssh"), l.LaptopHosts()}
		return append(append(append([]string{"ip", "netns", "exec", l.Net.NS("laptop")}, bind...), env...), argv...), nil
	}
	pid, err := l.agentPid(hostName)
	if err != nil {
		return nil, err
	}
	return append([]string{"nsenter", "-t", strconv.Itoa(pid), "-m", "-u", "-n", "--"}, argv...), nil
}

// passwdHome is the running user's home as the passwd database has it,
// which is where OpenSSH looks.
func passwdHome() string {
	if u, err := user.Current(); err == nil && u.HomeDir != "" {
		return u.HomeDir
	}
	return "/root"
}

func userName() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "root"
}

// agentPid finds the host agent's pid in the host's network namespace.
func (l *Lab) agentPid(hostName string) (int, error) {
	ns := l.Net.NS(hostName)
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		return 0, fmt.Errorf("host %s is not up", hostName)
	}
	for _, f := range strings.Fields(string(out)) {
		pid, _ := strconv.Atoi(f)
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(b), "agent\x00--spec") {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("host %s has no agent running", hostName)
}

// Exec replaces the current process with argv run in the lab.
func (l *Lab) Exec(hostName string, argv []string) error {
	full, err := l.ExecArgv(hostName, argv)
	if err != nil {
		return err
	}
	path, err := exec.LookPath(full[0])
	if err != nil {
		return err
	}
	return syscall.Exec(path, full, os.Environ())
}

// Status prints the lab's hosts and VMs.
func (l *Lab) Status(out io.Writer) error {
	if !l.daemonAlive() {
		fmt.Fprintf(out, "lab in %s is down\n", l.Dir)
		if ns := l.Net.List(); len(ns) > 0 {
			fmt.Fprintf(out, "leftover namespaces (labsim down removes them): %s\n", strings.Join(ns, " "))
		}
		return fmt.Errorf("lab is down")
	}
	resp, err := Call(l.ControlSocket(), Request{Op: "list"}, 10*time.Second)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "lab up in %s\n", l.Dir)
	fmt.Fprintf(out, "%-8s %-14s %s\n", "HOST", "ADDRESS", "STATE")
	fmt.Fprintf(out, "%-8s %-14s %s\n", "laptop", LaptopAddr, "up")
	for _, n := range l.Nodes() {
		fmt.Fprintf(out, "%-8s %-14s %s\n", n.Name, n.Addr, "up")
	}
	fmt.Fprintf(out, "%-8s %-14s %s\n", "mirror", MirrorAddr, "up")
	for _, v := range resp.VMs {
		fmt.Fprintf(out, "%-8s %-14s %s (VM %d)\n", v.Name, v.Addr, v.State, v.VMID)
	}
	return nil
}

// Faults are the switches tests and users can flip.
var Faults = map[string]string{
	"slow-boot":            "VMs take N seconds to boot (value: seconds)",
	"fail-boot":            "a started VM never comes up",
	"corrupt-image":        "the mirror serves the cloud image with a flipped byte",
	"reset-download":       "the mirror drops every cloud-image download halfway (a TCP reset)",
	"helm-fail":            "helm-install Jobs fail (value: a HelmChart name; empty: every chart)",
	"provider-never-ready": "a provider's Deployment never becomes Available (value: provider name, e.g. proxmox; empty: every provider)",
	"drop-connections":     "a host (value: pve, mirror, vm110, ...) drops off the network: its bridge port goes down, so connections to it hang and break",
	"stop-sshd":            "a Proxmox node's sshd stops (value: the node, e.g. pve2): connections to it are refused while the node itself runs",
}

// SetFault turns a fault on (with a value) or off.
func (l *Lab) SetFault(name, value string, on bool) error {
	if _, ok := Faults[name]; !ok {
		var names []string
		for n := range Faults {
			names = append(names, n)
		}
		return fmt.Errorf("unknown fault %q (faults: %s)", name, strings.Join(names, ", "))
	}
	if name == "drop-connections" {
		host := value
		if host == "" {
			if b, err := os.ReadFile(l.FaultPath(name)); err == nil {
				host = strings.TrimSpace(string(b))
			}
		}
		if host == "" {
			return fmt.Errorf("drop-connections needs a host: pve, mirror, laptop or vm<ID>")
		}
		state := "down"
		if !on {
			state = "up"
		}
		if err := l.Net.SetPort(host, state); err != nil {
			return err
		}
	}
	if name == "stop-sshd" {
		if err := l.stopSSHD(value, on); err != nil {
			return err
		}
	}
	if !on {
		err := os.Remove(l.FaultPath(name))
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	if err := os.MkdirAll(l.path("faults"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(l.FaultPath(name), []byte(value+"\n"), 0o644)
}

// stopSSHD stops a node's sshd (on) or starts it again (off), inside the
// node, as `systemctl stop ssh` would; the agent's own sshd config and
// pid file are kept. Off without a value takes the node from the fault's
// file.
func (l *Lab) stopSSHD(node string, on bool) error {
	if node == "" {
		if b, err := os.ReadFile(l.FaultPath("stop-sshd")); err == nil {
			node = strings.TrimSpace(string(b))
		}
	}
	if node == "" || !strings.HasPrefix(node, "pve") {
		return fmt.Errorf("stop-sshd needs a Proxmox node: pve, pve1, pve2, ...")
	}
	// The agent reaps its sshd only when it stops, so a killed one stays a
	// zombie: whether sshd runs is whether port 22 listens.
	listening := `ss -Hltn 'sport = :22' | grep -q .`
	script := `kill "$(cat /run/sshd.pid)" || exit 1; for i in $(seq 100); do ` + listening + ` || exit 0; sleep 0.1; done; echo sshd still listening; exit 1`
	if !on {
		script = listening + ` || exec /usr/sbin/sshd -f /etc/labsim/sshd_config`
	}
	argv, err := l.ExecArgv(node, []string{"sh", "-c", script})
	if err != nil {
		return err
	}
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("stop-sshd %s: %v: %s", node, err, out)
	}
	return nil
}

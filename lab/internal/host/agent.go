// Package host is the agent that makes a network namespace into a lab host:
// started inside the host's network namespace with private mount and UTS
// namespaces, it lays private copy-on-write overlays over the paths the host
// owns (its "disk", kept in the lab directory), sets the hostname, creates
// users as cloud-init would, generates fresh SSH host keys on first boot,
// runs a real OpenSSH sshd, and the host's role services.
package host

import (
	"bufio"

	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/mgmtctl/mgmtctl/lab/internal/vmos"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// User is an account created on first boot.
type User struct {
	Name           string `json:"name"`
	Sudo           bool   `json:"sudo"`
	AuthorizedKeys string `json:"authorizedKeys"`
}

// File is a file written on every boot.
type File struct {
	Content string      `json:"content"`
	Mode    os.FileMode `json:"mode"`
}

// Spec describes one host.
type Spec struct {
	Name     string `json:"name"`
	Hostname string `json:"hostname"`
	Addr     string `json:"addr"`
	MAC      string `json:"mac,omitempty"`
	// Disk holds the overlays' upper layers: what the host wrote survives
	// its restarts.
	Disk string `json:"disk"`
	// Overlays are the directories made private and writable.
	Overlays []string `json:"overlays"`
	Users    []User   `json:"users"`
	// RootLogin allows root by key (the Proxmox node).
	RootLogin bool              `json:"rootLogin"`
	Hosts     map[string]string `json:"hosts"` // name -> address, for /etc/hosts
	CACert    string            `json:"caCert"`
	Files     map[string]File   `json:"files"`
	// Dirs are directories the host has from its installer.
	Dirs []string `json:"dirs"`
	// Links are symlinks made on every boot: path -> target.
	Links map[string]string `json:"links"`
	// HostKeyOut is where the public ed25519 host key is copied for the
	// lab (known_hosts for the laptop, checks in tests).
	HostKeyOut string `json:"hostKeyOut"`
	// Role selects services: "pve", "mirror", "vm".
	Role string `json:"role"`
	// LabDir is the lab's directory; it stays visible (and shared) inside
	// the host whatever the host mounts over its parents.
	LabDir string `json:"labDir"`
	// Binds are directories shared with other hosts: path in the host ->
	// directory under LabDir (a Proxmox cluster's /etc/pve, as pmxcfs
	// gives every node the same one).
	Binds map[string]string `json:"binds,omitempty"`
	// CloudInitDelay is how long cloud-init "runs" after sshd is up.
	CloudInitDelay time.Duration `json:"cloudInitDelay"`
	// Services run in-process by role (set by the caller before Run).
	Services []func(ctx context.Context) error `json:"-"`
}

// Run sets the host up, prints READY, and serves until SIGTERM.
func Run(spec *Spec, stdout io.Writer) error {
	if err := mountAll(spec); err != nil {
		return err
	}
	if err := syscall.Sethostname([]byte(spec.Hostname)); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	if err := configure(spec); err != nil {
		return err
	}
	sshd, err := startSSHD(spec)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, len(spec.Services)+1)
	for _, svc := range spec.Services {
		go func(svc func(context.Context) error) { errc <- svc(ctx) }(svc)
	}
	if spec.Role == "vm" {
		// A guest announces its address once its network is up, so
		// neighbours that cached an earlier VM's MAC for it learn the new
		// one (the kernel's own announcement at link-up is sent before the
		// veth's queue runs, and is lost).
		vmos.Boot()
		if err := run("arping", "-U", "-c", "2", "-w", "2", "-I", "eth0", spec.Addr); err != nil {
			fmt.Fprintln(os.Stderr, "announce address:", err)
		}
		go cloudInit(spec)
	}
	fmt.Fprintln(stdout, "READY")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case err = <-errc:
	}
	_ = sshd.Process.Kill()
	_ = sshd.Wait()
	return err
}

func diskPath(spec *Spec, layer, dir string) string {
	return filepath.Join(spec.Disk, layer, strings.TrimPrefix(dir, "/"))
}

func mountAll(spec *Spec) error {
	// Nothing mounted here may reach the lab machine's own mount table.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// The lab directory may sit under a path the host covers (/tmp, /home):
	// park a bind of it on /mnt first and move it back over its own path
	// once everything is mounted.
	const stage = "/mnt"
	if spec.LabDir != "" {
		if err := syscall.Mount(spec.LabDir, stage, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("keep lab dir: %w", err)
		}
	}
	for _, d := range spec.Overlays {
		upper, work := diskPath(spec, "upper", d), diskPath(spec, "work", d)
		for _, p := range []string{upper, work, d} {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		}
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", d, upper, work)
		if err := syscall.Mount("overlay", d, "overlay", 0, opts); err != nil {
			return fmt.Errorf("overlay %s: %w", d, err)
		}
	}
	for _, d := range []string{"/run", "/tmp"} {
		if err := syscall.Mount("tmpfs", d, "tmpfs", 0, "mode=1777"); err != nil {
			return fmt.Errorf("tmpfs %s: %w", d, err)
		}
	}
	for _, d := range []string{"/run/sshd", "/run/lock"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod("/run", 0o755); err != nil {
		return err
	}
	// Each boot has an ID of its own, as the kernel makes one at boot;
	// the kernel's here is the lab machine's, shared by every host. The
	// kubelet reports it as the node's boot ID and tells a reboot by it.
	if err := bootID(); err != nil {
		return err
	}
	if spec.LabDir != "" {
		if err := os.MkdirAll(spec.LabDir, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount(stage, spec.LabDir, "", syscall.MS_MOVE, ""); err != nil {
			return fmt.Errorf("restore lab dir: %w", err)
		}
	}
	for target, src := range spec.Binds {
		for _, p := range []string{src, target} {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		}
		if err := syscall.Mount(src, target, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", src, target, err)
		}
	}
	return nil
}

// BootIDFile is the kernel's boot ID, which a host's boot covers with
// one of its own.
const BootIDFile = "/proc/sys/kernel/random/boot_id"

func bootID() error {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	h := hex.EncodeToString(b)
	id := "/run/boot_id"
	if err := os.WriteFile(id, []byte(h[:8]+"-"+h[8:12]+"-"+h[12:16]+"-"+h[16:20]+"-"+h[20:]+"\n"), 0o444); err != nil {
		return err
	}
	if err := syscall.Mount(id, BootIDFile, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("boot ID: %w", err)
	}
	return nil
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

const firstBoot = "/var/lib/labsim/first-boot-done"

// SimBinary is where a host keeps the multi-call binary its simulated
// commands (qm, pvesh, cloud-init, ...) link to.
const SimBinary = "/usr/local/lib/labsim/labsim"

func install(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

func configure(spec *Spec) error {
	var hosts strings.Builder
	fmt.Fprintf(&hosts, "127.0.0.1\tlocalhost\n127.0.1.1\t%s\n%s\t%s\n", spec.Hostname, spec.Addr, spec.Hostname)
	for name, addr := range spec.Hosts {
		fmt.Fprintf(&hosts, "%s\t%s\n", addr, name)
	}
	if err := os.WriteFile("/etc/hosts", []byte(hosts.String()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile("/etc/hostname", []byte(spec.Hostname+"\n"), 0o644); err != nil {
		return err
	}
	if spec.CACert != "" {
		bundle := "/etc/ssl/certs/ca-certificates.crt"
		b, _ := os.ReadFile(bundle)
		if !strings.Contains(string(b), spec.CACert) {
			if err := os.MkdirAll(filepath.Dir(bundle), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(bundle, append(b, []byte(spec.CACert)...), 0o644); err != nil {
				return err
			}
		}
	}
	for _, d := range spec.Dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for p, f := range spec.Files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(f.Content), f.Mode); err != nil {
			return err
		}
	}
	// The simulated commands are installed on the host itself (as a real
	// package would put them), not run from the lab directory, which the
	// host's users need not be able to read.
	if len(spec.Links) > 0 {
		if err := install(filepath.Join(spec.LabDir, "bin/labsim"), SimBinary); err != nil {
			return err
		}
	}
	for p, target := range spec.Links {
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		_ = os.Remove(p)
		if err := os.Symlink(target, p); err != nil {
			return err
		}
	}
	if _, err := os.Stat(firstBoot); err != nil {
		if err := firstBootSetup(spec); err != nil {
			return err
		}
	}
	if spec.HostKeyOut != "" {
		b, err := os.ReadFile("/etc/ssh/ssh_host_ed25519_key.pub")
		if err != nil {
			return err
		}
		if err := os.WriteFile(spec.HostKeyOut, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// firstBootSetup is what cloud-init (or the installer) does once.
func firstBootSetup(spec *Spec) error {
	// Fresh host keys: never the lab machine's own.
	keys, _ := filepath.Glob("/etc/ssh/ssh_host_*")
	for _, k := range keys {
		_ = os.Remove(k)
	}
	if err := run("ssh-keygen", "-A"); err != nil {
		return err
	}
	for _, u := range spec.Users {
		home := "/home/" + u.Name
		if u.Name == "root" {
			home = "/root"
			// A fresh install's root: Debian's own dotfiles, not the lab
			// machine's (whose .bashrc, read by bash for every SSH
			// command, may start a language manager in 150 ms).
			if err := writeRootDotfiles(); err != nil {
				return err
			}
		} else {
			args := []string{"-m", "-s", "/bin/bash", u.Name}
			if err := run("useradd", args...); err != nil {
				return err
			}
			// '*' rather than useradd's '!': no password, but not locked,
			// which sshd without PAM would refuse.
			if err := run("usermod", "-p", "*", u.Name); err != nil {
				return err
			}
		}
		if u.Sudo {
			line := u.Name + " ALL=(ALL) NOPASSWD:ALL\n"
			if err := os.MkdirAll("/etc/sudoers.d", 0o750); err != nil {
				return err
			}
			if err := os.WriteFile("/etc/sudoers.d/90-cloud-init-users", []byte("# Created by cloud-init v. 24.4 on boot\n\n# User rules for "+u.Name+"\n"+line), 0o440); err != nil {
				return err
			}
		}
		if u.AuthorizedKeys != "" {
			if err := os.MkdirAll(home+"/.ssh", 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(home+"/.ssh/authorized_keys", []byte(u.AuthorizedKeys), 0o600); err != nil {
				return err
			}
			if u.Name != "root" {
				if err := run("chown", "-R", u.Name+":"+u.Name, home+"/.ssh"); err != nil {
					return err
				}
			}
		}
	}
	if err := os.MkdirAll(filepath.Dir(firstBoot), 0o755); err != nil {
		return err
	}
	return os.WriteFile(firstBoot, nil, 0o644)
}

func startSSHD(spec *Spec) (*exec.Cmd, error) {
	root := "prohibit-password"
	if !spec.RootLogin {
		root = "no"
	}
	cfg := fmt.Sprintf(`ListenAddress %s
HostKey /etc/ssh/ssh_host_ed25519_key
HostKey /etc/ssh/ssh_host_ecdsa_key
HostKey /etc/ssh/ssh_host_rsa_key
PidFile /run/sshd.pid
PermitRootLogin %s
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
MaxSessions 100
MaxStartups 100
AcceptEnv LANG LC_*
LogLevel INFO
`, spec.Addr, root)
	if err := os.MkdirAll("/etc/labsim", 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile("/etc/labsim/sshd_config", []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", "/etc/labsim/sshd_config")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(stderr)
	var lines []string
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "Server listening on") {
			go func() {
				for sc.Scan() {
					fmt.Fprintln(os.Stderr, "sshd:", sc.Text())
				}
			}()
			return cmd, nil
		}
		lines = append(lines, line)
	}
	_ = cmd.Wait()
	return nil, fmt.Errorf("sshd did not start: %s", strings.Join(lines, "; "))
}

// cloudInit stands in for cloud-init's run on each boot: running while
// its modules run, then done (what `cloud-init status` reports).
func cloudInit(spec *Spec) {
	write := func(name string, v any) {
		b, _ := json.MarshalIndent(v, "", " ")
		_ = os.MkdirAll("/run/cloud-init", 0o755)
		_ = os.WriteFile(filepath.Join("/run/cloud-init", name), b, 0o644)
	}
	write("status.json", map[string]any{"v1": map[string]any{"stage": "modules-config", "datasource": "DataSourceNoCloud"}})
	<-time.After(spec.CloudInitDelay)
	write("result.json", map[string]any{"v1": map[string]any{"datasource": "DataSourceNoCloud", "errors": []string{}}})
	write("status.json", map[string]any{"v1": map[string]any{"stage": nil, "datasource": "DataSourceNoCloud"}})
}

// Debian's /root/.bashrc and /root/.profile as its installer leaves them.
const (
	debianRootBashrc = `# ~/.bashrc: executed by bash(1) for non-login shells.

# Note: PS1 and umask are already set in /etc/profile. You should not
# need this unless you want different defaults for root.
# PS1='${debian_chroot:+($debian_chroot)}\h:\w\$ '
# umask 022

# You may uncomment the following lines if you want ` + "`ls'" + ` to be colorized:
# export LS_OPTIONS='--color=auto'
# eval "$(dircolors)"
# alias ls='ls $LS_OPTIONS'
# alias ll='ls $LS_OPTIONS -l'
# alias l='ls $LS_OPTIONS -lA'
#
# Some more alias to avoid making mistakes:
# alias rm='rm -i'
# alias cp='cp -i'
# alias mv='mv -i'
`
	debianRootProfile = `# ~/.profile: executed by Bourne-compatible login shells.

if [ "$BASH" ]; then
  if [ -f ~/.bashrc ]; then
    . ~/.bashrc
  fi
fi

mesg n 2> /dev/null || true
`
)

func writeRootDotfiles() error {
	if err := os.WriteFile("/root/.bashrc", []byte(debianRootBashrc), 0o644); err != nil {
		return err
	}
	return os.WriteFile("/root/.profile", []byte(debianRootProfile), 0o644)
}

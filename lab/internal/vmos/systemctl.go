package vmos

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Unit state lives on the VM's disk so the lab daemon can read it (the
// guest agent answers only while its unit is active): <unit>.active while
// running, <unit>.enabled when enabled, <unit>.log one line per start,
// restart and stop.
const unitState = "var/lib/labsim/units"

var unitDirs = []string{"etc/systemd/system", "usr/lib/systemd/system", "lib/systemd/system"}

func unitName(u string) string {
	if !strings.Contains(u, ".") {
		return u + ".service"
	}
	return u
}

func unitFile(u string) (string, bool) {
	for _, d := range unitDirs {
		f := p(filepath.Join(d, u))
		if isMask(f) {
			continue
		}
		if _, err := os.Stat(f); err == nil {
			return f, true
		}
	}
	return "", false
}

// A unit is masked by a symlink to /dev/null named after it: in
// /run/systemd/system until the next boot (mask --runtime), or in
// /etc/systemd/system (systemctl(1), mask). systemd refuses every job
// but stop on a masked unit: "Unit %s is masked." (src/core/unit.c,
// bus_unit_validate_load_state, systemd 255).
const runtimeUnitDir = "run/systemd/system"

func isMask(path string) bool {
	dst, err := os.Readlink(path)
	return err == nil && dst == "/dev/null"
}

// maskedState is systemctl is-enabled's word for a masked unit, "" for
// one that is not.
func maskedState(u string) string {
	switch {
	case isMask(p(filepath.Join(runtimeUnitDir, u))):
		return "masked-runtime"
	case isMask(p(filepath.Join("etc/systemd/system", u))):
		return "masked"
	}
	return ""
}

// errMasked is systemd's refusal of a start on a masked unit.
type errMasked string

func (e errMasked) Error() string { return "Unit " + string(e) + " is masked." }

// lockUnit serializes a unit's jobs, as systemd runs one job per unit at
// a time: a start is registered (its process started and known as
// activating) or refused before a stop or a mask looks at the unit, never
// halfway. Without it, a stop could find nothing to stop while a start
// already under way goes on to start the unit a moment later.
func lockUnit(u string) (unlock func()) {
	_ = os.MkdirAll(p(unitState), 0o755)
	f, err := os.OpenFile(state(u, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return func() {}
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
	return func() { f.Close() }
}

func state(u, kind string) string { return p(filepath.Join(unitState, u+"."+kind)) }

func isActive(u string) bool {
	b, err := os.ReadFile(state(u, "active"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid == 0 {
		return true // a unit with nothing to run (the guest agent's stand-in)
	}
	// EPERM: alive, owned by root, asked by a user.
	err = syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}

// activatingPid is the process of a Type=notify unit that has started
// and not yet said READY=1: systemd shows such a unit as "activating"
// (systemd.service(5), Type=notify: the unit is started only once the
// service sends READY=1), and stop ends it like a running one. 0 for none.
func activatingPid(u string) int {
	b, err := os.ReadFile(state(u, "activating"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 || syscall.Kill(pid, 0) == syscall.ESRCH {
		return 0
	}
	return pid
}

func record(u, what string) {
	_ = os.MkdirAll(p(unitState), 0o755)
	f, err := os.OpenFile(state(u, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), what)
		f.Close()
	}
}

func unitType(file string) string {
	b, _ := os.ReadFile(file)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Type="); ok {
			return v
		}
	}
	return "simple"
}

// execStart reads a unit's ExecStart, joining backslash continuations and
// unquoting single-quoted words (the k3s installer writes them so).
func execStart(file string) []string {
	b, _ := os.ReadFile(file)
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "ExecStart="); ok {
			var argv []string
			for _, w := range strings.Fields(v) {
				argv = append(argv, strings.Trim(w, "'\""))
			}
			return argv
		}
	}
	return nil
}

// environment reads a unit's EnvironmentFile= lines in order
// (systemd.exec(5)): "-" before the path ignores a missing file, %N is
// the unit's name without its suffix; each file holds KEY=VALUE lines,
// "#" and ";" start comments, and a value in single or double quotes has
// them removed. The k3s installer's unit reads /etc/default/k3s, then
// /etc/sysconfig/k3s, then k3s.service.env.
func environment(file, unit string) ([]string, error) {
	b, _ := os.ReadFile(file)
	var env []string
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "EnvironmentFile=")
		if !ok {
			continue
		}
		optional := strings.HasPrefix(v, "-")
		v = strings.ReplaceAll(strings.TrimPrefix(v, "-"), "%N", strings.TrimSuffix(unit, ".service"))
		data, err := os.ReadFile(p(v))
		if err != nil {
			if optional && os.IsNotExist(err) {
				continue
			}
			return nil, fmt.Errorf("failed to load environment files: %w", err)
		}
		for _, l := range strings.Split(string(data), "\n") {
			l = strings.TrimSpace(l)
			if l == "" || l[0] == '#' || l[0] == ';' {
				continue
			}
			k, val, ok := strings.Cut(l, "=")
			if !ok {
				continue
			}
			if n := len(val); n >= 2 && (val[0] == '\'' || val[0] == '"') && val[n-1] == val[0] {
				val = val[1 : n-1]
			}
			env = append(env, strings.TrimSpace(k)+"="+val)
		}
	}
	return env, nil
}

func start(u string) error {
	unlock := lockUnit(u)
	registered := false
	defer func() {
		if !registered {
			unlock()
		}
	}()
	if maskedState(u) != "" {
		return errMasked(u)
	}
	file, ok := unitFile(u)
	if !ok {
		return fmt.Errorf("Unit %s not found.", u)
	}
	if isActive(u) || activatingPid(u) > 0 {
		return nil
	}
	_ = os.MkdirAll(p(unitState), 0o755)
	pid := 0
	if argv := execStart(file); len(argv) > 0 && u != "qemu-guest-agent.service" {
		if _, err := os.Stat(argv[0]); err != nil {
			return fmt.Errorf("Job for %s failed because the control process exited with error code.", u)
		}
		logf, _ := os.OpenFile(p("var/log/"+strings.TrimSuffix(u, ".service")+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = logf, logf
		env, err := environment(file, u)
		if err != nil {
			return fmt.Errorf("Job for %s failed: %v", u, err)
		}
		cmd.Env = append(os.Environ(), env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		// Type=notify: like systemd, hand the service a NOTIFY_SOCKET and
		// return from start only once it says READY=1 (or dies).
		var notify *net.UnixConn
		if unitType(file) == "notify" {
			sock := p(fmt.Sprintf("run/labsim-notify-%s-%d.sock", u, time.Now().UnixNano()))
			_ = os.MkdirAll(filepath.Dir(sock), 0o755)
			c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
			if err != nil {
				return err
			}
			defer os.Remove(sock)
			defer c.Close()
			notify = c
			cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+sock)
		}
		// systemd forks a unit's process itself, so it holds none of the
		// client's descriptors (a lock the caller's shell took, say): the
		// ones this client inherited are not passed on.
		closeInheritedOnExec()
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("Job for %s failed: %v", u, err)
		}
		pid = cmd.Process.Pid
		if notify != nil {
			_ = os.WriteFile(state(u, "activating"), []byte(strconv.Itoa(pid)+"\n"), 0o644)
			defer os.Remove(state(u, "activating"))
			// Known as activating now: a stop may look.
			registered = true
			unlock()
			died := make(chan error, 1)
			go func() { died <- cmd.Wait() }()
			ready := make(chan bool, 1)
			go func() {
				buf := make([]byte, 4096)
				for {
					n, _, err := notify.ReadFromUnix(buf)
					if err != nil {
						ready <- false
						return
					}
					if strings.Contains(string(buf[:n]), "READY=1") {
						ready <- true
						return
					}
				}
			}()
			select {
			case <-ready:
			case <-died:
				record(u, "failed")
				return fmt.Errorf("Job for %s failed because the control process exited with error code.\nSee \"systemctl status %s\" and \"journalctl -xeu %s\" for details.", u, u, u)
			case <-time.After(5 * time.Minute):
				return fmt.Errorf("Job for %s failed because a timeout was exceeded.", u)
			}
		} else {
			_ = cmd.Process.Release()
		}
	}
	record(u, "start")
	return os.WriteFile(state(u, "active"), []byte(strconv.Itoa(pid)+"\n"), 0o644)
}

// closeInheritedOnExec marks every descriptor above stderr close-on-exec:
// Go opens its own so, but one inherited from the shell that ran
// systemctl is not.
func closeInheritedOnExec() {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range fds {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

func stop(u string) {
	defer lockUnit(u)()
	b, err := os.ReadFile(state(u, "active"))
	if err != nil {
		if pid := activatingPid(u); pid > 0 {
			// Still starting: its start job fails as the process ends.
			terminate(pid)
			record(u, "stop")
		}
		return
	}
	if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 {
		terminate(pid)
	}
	_ = os.Remove(state(u, "active"))
	record(u, "stop")
}

// terminate ends a unit's process group as systemd's stop does.
func terminate(pid int) {
	if pid > 0 {
		// Like systemd, wait for the process to go (TimeoutStopSec, 90s
		// by default) before the unit counts as stopped.
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		deadline := time.Now().Add(90 * time.Second)
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			<-time.After(50 * time.Millisecond)
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}

// Systemctl implements the systemctl verbs the k3s phase and the k3s
// installer use, with systemctl's messages and exit codes (3 for an
// inactive unit from is-active, 5 for a missing unit).
func Systemctl(args []string, stdout, stderr io.Writer) int {
	var words, props []string
	now, value, runtime, tsStyle := false, false, false, ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--now":
			now = true
		case a == "--value":
			value = true
		case a == "--runtime":
			runtime = true
		case a == "-p" || a == "--property":
			if i+1 < len(args) {
				i++
				props = append(props, strings.Split(args[i], ",")...)
			}
		case strings.HasPrefix(a, "--property="):
			props = append(props, strings.Split(strings.TrimPrefix(a, "--property="), ",")...)
		case strings.HasPrefix(a, "--timestamp="):
			tsStyle = strings.TrimPrefix(a, "--timestamp=")
		case strings.HasPrefix(a, "-"):
		default:
			words = append(words, a)
		}
	}
	if len(words) > 0 && words[0] == "show" {
		return show(words[1:], props, value, tsStyle, stdout, stderr)
	}
	if len(words) == 0 {
		fmt.Fprintln(stderr, "systemctl: listing units is not simulated")
		return 1
	}
	verb, units := words[0], words[1:]
	if verb == "daemon-reload" {
		return 0
	}
	switch verb {
	case "start", "restart", "stop", "enable", "mask":
		// A job goes on when the client that asked for it goes: systemd
		// runs it, not systemctl. Here the client does the job, so it
		// outlives a hang-up (an SSH session cut while it waits for
		// READY=1) and the unit still ends active or failed, never a
		// process that no unit state knows.
		signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	}
	code := 0
	for _, raw := range units {
		u := unitName(filepath.Base(raw))
		switch verb {
		case "start", "restart", "enable", "disable", "stop", "mask", "unmask":
			if os.Geteuid() != 0 {
				fmt.Fprintln(stderr, "Failed to "+verb+" "+u+": Access denied")
				return 1
			}
		}
		_, exists := unitFile(u)
		switch verb {
		case "start", "restart":
			if !exists {
				fmt.Fprintf(stderr, "Failed to %s %s: Unit %s not found.\n", verb, u, u)
				code = 5
				continue
			}
			if maskedState(u) != "" {
				// systemd refuses the whole job, a restart's stop too.
				fmt.Fprintf(stderr, "Failed to %s %s: %v\n", verb, u, errMasked(u))
				code = 1
				continue
			}
			if verb == "restart" && isActive(u) {
				stop(u)
				record(u, "restart")
			}
			if err := start(u); err != nil {
				if m, ok := err.(errMasked); ok {
					// Masked while this start waited for the unit.
					fmt.Fprintf(stderr, "Failed to %s %s: %v\n", verb, u, m)
				} else {
					fmt.Fprintln(stderr, err)
				}
				code = 1
			}
		case "mask":
			// systemd 255 install.c (src, shared directory): the symlink, and
			// install_changes_dump's "Created symlink %s → %s.".
			dir := "etc/systemd/system"
			if runtime {
				dir = runtimeUnitDir
			}
			link := p(filepath.Join(dir, u))
			if !isMask(link) {
				if _, err := os.Lstat(link); err == nil {
					fmt.Fprintf(stderr, "Failed to mask unit: File /%s/%s already exists.\n", dir, u)
					code = 1
					continue
				}
				_ = os.MkdirAll(filepath.Dir(link), 0o755)
				unlock := lockUnit(u)
				err := os.Symlink("/dev/null", link)
				unlock()
				if err != nil {
					fmt.Fprintf(stderr, "Failed to mask unit: %v\n", err)
					code = 1
					continue
				}
				fmt.Fprintf(stderr, "Created symlink /%s/%s → /dev/null.\n", dir, u)
				record(u, "mask")
			}
			if now {
				stop(u)
			}
		case "unmask":
			dir := "etc/systemd/system"
			if runtime {
				dir = runtimeUnitDir
			}
			if link := p(filepath.Join(dir, u)); isMask(link) {
				_ = os.Remove(link)
				fmt.Fprintf(stderr, "Removed \"/%s/%s\".\n", dir, u)
				record(u, "unmask")
			}
		case "stop":
			stop(u)
		case "enable":
			if !exists {
				fmt.Fprintf(stderr, "Failed to enable unit: Unit file %s does not exist.\n", u)
				code = 1
				continue
			}
			_ = os.MkdirAll(p(unitState), 0o755)
			if _, err := os.Stat(state(u, "enabled")); err != nil {
				fmt.Fprintf(stderr, "Created symlink /etc/systemd/system/multi-user.target.wants/%s → /etc/systemd/system/%s.\n", u, u)
			}
			_ = os.WriteFile(state(u, "enabled"), nil, 0o644)
			if now {
				if err := start(u); err != nil {
					fmt.Fprintln(stderr, err)
					code = 1
				}
			}
		case "disable":
			_ = os.Remove(state(u, "enabled"))
		case "is-active":
			if isActive(u) {
				fmt.Fprintln(stdout, "active")
			} else if activatingPid(u) > 0 {
				fmt.Fprintln(stdout, "activating")
				code = 3
			} else {
				fmt.Fprintln(stdout, "inactive")
				code = 3
			}
		case "is-enabled":
			if m := maskedState(u); m != "" {
				fmt.Fprintln(stdout, m)
				code = 1
			} else if _, err := os.Stat(state(u, "enabled")); err == nil {
				fmt.Fprintln(stdout, "enabled")
			} else if exists {
				fmt.Fprintln(stdout, "disabled")
				code = 1
			} else {
				fmt.Fprintf(stderr, "Failed to get unit file state for %s: No such file or directory\n", u)
				code = 1
			}
		case "status":
			if !exists {
				fmt.Fprintf(stderr, "Unit %s could not be found.\n", u)
				code = 4
				continue
			}
			st := "inactive (dead)"
			if isActive(u) {
				st = "active (running)"
			} else {
				code = 3
			}
			fmt.Fprintf(stdout, "● %s\n     Active: %s\n", u, st)
		default:
			fmt.Fprintf(stderr, "Unknown command verb %s.\n", verb)
			return 1
		}
	}
	return code
}

// Boot brings units to their boot state: nothing runs after a power-off;
// enabled units start.
func Boot() {
	// /run is a tmpfs: what was masked until the next boot is not.
	if links, err := os.ReadDir(p(runtimeUnitDir)); err == nil {
		for _, l := range links {
			if f := p(filepath.Join(runtimeUnitDir, l.Name())); isMask(f) {
				_ = os.Remove(f)
			}
		}
	}
	entries, _ := os.ReadDir(p(unitState))
	for _, e := range entries {
		if u, ok := strings.CutSuffix(e.Name(), ".active"); ok {
			_ = os.Remove(p(filepath.Join(unitState, e.Name())))
			record(u, "power-off")
		}
	}
	for _, e := range entries {
		if u, ok := strings.CutSuffix(e.Name(), ".enabled"); ok {
			_ = start(u)
		}
	}
	// The guest agent's unit is static: udev starts it at boot when the
	// VM has the agent's virtio port (qm --agent 1).
	if installed("qemu-guest-agent") {
		_ = start("qemu-guest-agent.service")
	}
}

// show prints unit properties as `systemctl show -p NAME [--value]
// [--timestamp=STYLE] UNIT` does. Only what mgmtctl reads is simulated:
// ActiveState and ActiveEnterTimestamp (when the unit last became active,
// which for Type=notify is after READY=1; empty while it never was since
// boot), in systemd's styles: "pretty" (the default: "Thu 2026-12-03
// 06:17:03 UTC"), "us+utc" (microseconds) and "unix" ("@1764742623").
func show(units, props []string, value bool, style string, stdout, stderr io.Writer) int {
	if len(units) != 1 {
		fmt.Fprintln(stderr, "systemctl show: the lab simulates one unit at a time")
		return 1
	}
	u := unitName(filepath.Base(units[0]))
	for _, prop := range props {
		v := ""
		switch prop {
		case "ActiveState":
			v = "inactive"
			if isActive(u) {
				v = "active"
			}
		case "ActiveEnterTimestamp":
			if fi, err := os.Stat(state(u, "active")); err == nil {
				v = timestamp(fi.ModTime(), style)
			}
		default:
			fmt.Fprintf(stderr, "systemctl show: property %s is not simulated\n", prop)
			return 1
		}
		if value {
			fmt.Fprintln(stdout, v)
		} else {
			fmt.Fprintf(stdout, "%s=%s\n", prop, v)
		}
	}
	return 0
}

func timestamp(t time.Time, style string) string {
	t = t.UTC()
	switch style {
	case "unix":
		return "@" + strconv.FormatInt(t.Unix(), 10)
	case "us+utc", "us":
		return t.Format("Mon 2006-01-02 15:04:05.000000 MST")
	}
	return t.Format("Mon 2006-01-02 15:04:05 MST")
}

package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mgmtctl/mgmtctl/lab/labtest"
)

// haBackedUp is three servers converged, a marker object made and a
// backup taken: where a restore starts from, and where TestHA starts.
// Its first apply, of three servers from nothing, is TestHA's: run with
// the race-built tool under make test, and it prints no cluster token
// and no Proxmox token secret.
var haBackedUp = &labtest.Template{Name: "three servers and a backup", Nodes: 3, Build: func(t testing.TB, l *labtest.Lab) {
	e := haEnv(t, l)
	e.bin = raceChecked(t, e.bin)
	r := e.apply()
	mustSucceed(t, r, "apply")
	token := strings.TrimSpace(e.SSH("ubuntu", "192.0.2.50", filepath.Join(e.LaptopHome(), ".config/mgmtctl/known_hosts"), "sudo cat /var/lib/rancher/k3s/server/token").Stdout)
	if !strings.HasPrefix(token, "K10") {
		t.Fatalf("cluster token: %q", token)
	}
	noSecret(t, r, token, e.secret())
	if r := e.viaVIP("create", "configmap", "before-backup", "--from-literal=k=v"); !strings.Contains(r.Stdout, "created") {
		t.Fatalf("test object: %+v", r)
	}
	mustSucceed(t, e.mgmtctl("backup"), "backup")
}}

// killAtStep runs `mgmtctl args... -o json` in the laptop namespace and
// SIGKILLs it (with its children) at the first event at says is the
// point; it reports whether the point was reached.
func (e *env) killAtStep(at func(runEvent) bool, args ...string) bool {
	e.t.Helper()
	full, err := e.ExecArgv("", append([]string{e.bin}, append(args, "-o", "json", "-c", e.ConfigPath())...))
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(full[0], full[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	reached := false
	sc := bufio.NewScanner(pipe)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev runEvent
		if reached || json.Unmarshal(sc.Bytes(), &ev) != nil || !at(ev) {
			continue
		}
		reached = true
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.Wait()
	return reached
}

// TestRestoreKillPoints kills a restore of three servers as each of its
// steps starts, in a copy of a lab of its own, and runs it again: the
// second completes it, with three healthy members and the object the
// backup holds back, and a further apply changes nothing. It takes about
// a minute and a half a point, so it runs with the drop points
// (MGMTCTL_DROP_POINTS=1, make drop-points); TestHARestore kills one in CI.
func TestRestoreKillPoints(t *testing.T) {
	t.Parallel()
	if os.Getenv("MGMTCTL_DROP_POINTS") == "" {
		t.Skip("part of the drop points: run with MGMTCTL_DROP_POINTS=1 (make drop-points)")
	}
	backupOf := func(e *env) string {
		dirs, _ := filepath.Glob(filepath.Join(e.LaptopHome(), ".local/share/mgmtctl/backups/lab-mgmt/*"))
		if len(dirs) != 1 {
			t.Fatalf("backups: %v", dirs)
		}
		return dirs[0]
	}
	// The points: every step the restore phase starts, in order.
	ref := haEnv(t, haBackedUp.Start(t))
	r := ref.mgmtctl("restore", "--from", backupOf(ref), "--yes", "-o", "json")
	mustSucceed(t, r, "the reference restore")
	var points []runEvent
	for _, l := range strings.Split(r.Stdout, "\n") {
		var ev runEvent
		if json.Unmarshal([]byte(l), &ev) == nil && ev.Event == "step-start" && ev.Phase == "restore" && ev.Step != "gather-facts" {
			points = append(points, ev)
		}
	}
	if len(points) < 8 {
		t.Fatalf("only %d restore steps in:\n%s", len(points), r.Stdout)
	}
	for _, p := range points {
		t.Run(p.Step+"@"+p.Host, func(t *testing.T) {
			e := haEnv(t, haBackedUp.Start(t))
			backup := backupOf(e)
			if !e.killAtStep(func(ev runEvent) bool {
				return ev.Event == "step-start" && ev.Phase == "restore" && ev.Step == p.Step && ev.Host == p.Host
			}, "restore", "--from", backup, "--yes") {
				t.Fatalf("the restore never reached %s@%s", p.Step, p.Host)
			}
			r := e.mgmtctl("restore", "--from", backup, "--yes")
			mustSucceed(t, r, "the restore after a kill at "+p.Step+"@"+p.Host)
			if !strings.Contains(r.Stdout, "3 etcd members healthy") {
				t.Errorf("members after the second restore:\n%s", r.Stdout)
			}
			if out := e.viaVIP("get", "configmap", "before-backup", "-o", "jsonpath={.data.k}").Stdout; out != "v" {
				t.Errorf("the object is not back: %q", out)
			}
			if got := recap(t, e.apply()); !strings.Contains(got, "changed=0 ") {
				t.Errorf("apply after the restore: %s", got)
			}
		})
	}
}

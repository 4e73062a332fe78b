package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
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

// runEvent is the part of mgmtctl's JSON events (ui.JSON) the tests read.
type runEvent struct {
	Event   string `json:"event"`
	Phase   string `json:"phase"`
	Step    string `json:"step"`
	Host    string `json:"host"`
	Outcome string `json:"outcome"`
}

// dropped is a run whose host link went down at a drop point.
type dropped struct {
	labtest.Result
	At       bool          // the drop point was reached
	Detected time.Duration // from the drop to the run's exit
}

// dropWhen runs `mgmtctl apply -o json` with args and, at the first event
// at matches, takes host's link down (labsim's drop-connections fault),
// then waits, at most bound, for the run to end. The link stays down: the
// caller brings it back.
func (e *env) dropWhen(host string, at func(runEvent) bool, bound time.Duration, args ...string) dropped {
	e.t.Helper()
	full, err := e.ExecArgv("", append([]string{e.bin, "apply", "-o", "json", "-c", e.ConfigPath()}, args...))
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(full[0], full[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout, stderr bytes.Buffer
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	var d dropped
	var droppedAt time.Time
	sc := bufio.NewScanner(pipe)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		stdout.Write(sc.Bytes())
		stdout.WriteByte('\n')
		var ev runEvent
		if d.At || json.Unmarshal(sc.Bytes(), &ev) != nil || !at(ev) {
			continue
		}
		// A VM that has just been started has no link yet (its boot
		// takes a moment): it drops as soon as it has one.
		for deadline := time.Now().Add(30 * time.Second); ; {
			err := e.SetFault("drop-connections", host, true)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				e.t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		d.At, droppedAt = true, time.Now()
		// The run must end by itself; the test gives up after bound.
		timer := time.AfterFunc(bound, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		defer timer.Stop()
	}
	err = cmd.Wait()
	if d.At {
		d.Detected = time.Since(droppedAt)
	}
	d.Stdout, d.Stderr = stdout.String(), stderr.String()
	if ee, ok := err.(*exec.ExitError); ok {
		d.Code = ee.ExitCode()
	}
	return d
}

// TestDropDuringK3sInstall: the VM's link goes down while the k3s
// installer runs. The run fails within 60 s, naming the host, its
// address, what was running and what to do, with the exit code of an
// unreachable host; once the link is back one apply converges and the
// next changes nothing.
func TestDropDuringK3sInstall(t *testing.T) {
	t.Parallel()
	e := start(t)
	mustSucceed(t, e.apply("--tags", "vm"), "the VM")
	vm := "vm" + strconv.Itoa(lab.VMID)
	d := e.dropWhen(vm, func(ev runEvent) bool {
		return ev.Event == "progress" && ev.Phase == "k3s" && ev.Step == "install"
	}, 3*time.Minute, "--tags", "k3s")
	if !d.At {
		t.Fatalf("the k3s install never started:\n%s\n%s", d.Stdout, d.Stderr)
	}
	t.Logf("the run ended %v after the drop: exit %d\n%s", d.Detected.Round(time.Second), d.Code, d.Stderr)
	if d.Detected > 60*time.Second {
		t.Errorf("the run took %v to notice the dropped link", d.Detected)
	}
	if d.Code != 4 {
		t.Errorf("exit %d, want 4 (a host unreachable)", d.Code)
	}
	// The drop lands as the installer starts. Once its command runs, the
	// run says how far into it the link went and that it may be
	// half-done; where the drop beat the opening of the command's session
	// (the test reacts to the progress event), nothing of it ran, and the
	// run says the link went during it, and no more.
	out := d.Stdout + d.Stderr
	want := []string{"lost the connection to lab-mgmt (192.0.2.50:22)", "next: check the network to lab-mgmt (192.0.2.50), then run the same command again"}
	if strings.Contains(out, "during install k3s v1.35.7+k3s1") {
		if strings.Contains(out, "may have stopped part of the way") {
			t.Error("a command that never started is said to be half-done")
		}
	} else {
		want = append(want, "into install k3s v1.35.7+k3s1", "may have stopped part of the way")
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q", w)
		}
	}
	if err := e.SetFault("drop-connections", "", false); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, e.apply("--tags", "vm,k3s"), "apply once the link is back")
	if got := recap(t, e.apply("--tags", "vm,k3s")); !strings.Contains(got, "changed=0") {
		t.Errorf("a further run: %s", got)
	}
}

// dropPoint is a step boundary of a fresh apply and a host whose link
// goes down there.
type dropPoint struct {
	Phase, Step, StepHost string
	Drop                  string // pve, mirror, vm110
}

func (p dropPoint) String() string {
	return fmt.Sprintf("%s/%s on %s, %s dropped", p.Phase, p.Step, p.StepHost, p.Drop)
}

// mirrorSteps are the steps whose hosts fetch from the internet (the
// mirror): the node's image download, the VM's k3s installer, the
// helm-controller's chart pull, the operator's provider releases.
var mirrorSteps = map[string]bool{"vm/image": true, "k3s/install": true, "addons/cert-manager-chart": true, "capi/provider-core": true}

// dropPoints lists, from a fresh apply's own events, every step start
// and the hosts to drop there: the step's own (the laptop's steps talk to
// the VM's API), and the mirror where the step fetches from it. The VM's
// link exists once the VM has started.
func dropPoints(t *testing.T, events string) []dropPoint {
	var points []dropPoint
	vmUp := false
	vm := "vm" + strconv.Itoa(lab.VMID)
	for _, line := range strings.Split(events, "\n") {
		var ev runEvent
		if json.Unmarshal([]byte(line), &ev) != nil || ev.Event != "step-start" {
			continue
		}
		p := dropPoint{Phase: ev.Phase, Step: ev.Step, StepHost: ev.Host}
		if p.StepHost == "" {
			p.StepHost = "every host"
		}
		switch {
		case ev.Host == "pve", ev.Host == "" && ev.Phase == "vm":
			// The vm phase's gather-facts reaches the node.
			p.Drop = "pve"
		case vmUp:
			p.Drop = vm
		}
		if p.Drop != "" {
			points = append(points, p)
		}
		if mirrorSteps[ev.Phase+"/"+ev.Step] {
			p.Drop = "mirror"
			points = append(points, p)
		}
		if ev.Phase == "vm" && ev.Step == "start-vm" {
			vmUp = true
		}
	}
	if len(points) < 20 {
		t.Fatalf("only %d drop points in:\n%s", len(points), events)
	}
	return points
}

// TestDropPoints drops, at every step boundary of a fresh single-server
// apply, each host the step talks to, in a lab of its own: the run fails
// clearly within 60 s of the drop (or, where the rest of the run does not
// need that host, succeeds), and once the link is back one apply
// converges and a further one changes nothing, with one VM and no
// half-written file. It takes about an hour on 2 cores, so it runs only
// with MGMTCTL_DROP_POINTS=1 (make drop-points); DROP_POINTS=regexp
// narrows it to the points whose name matches.
func TestDropPoints(t *testing.T) {
	t.Parallel()
	if os.Getenv("MGMTCTL_DROP_POINTS") == "" {
		t.Skip("about an hour: run with MGMTCTL_DROP_POINTS=1 (make drop-points)")
	}
	ref := start(t)
	r := ref.mgmtctl("apply", "-o", "json")
	mustSucceed(t, r, "the reference apply")
	points := dropPoints(t, r.Stdout)
	var only *regexp.Regexp
	if f := os.Getenv("DROP_POINTS"); f != "" {
		only = regexp.MustCompile(f)
	}
	var slowest time.Duration
	var held, failed int
	for _, p := range points {
		if only != nil && !only.MatchString(p.String()) {
			continue
		}
		ok := t.Run(strings.NewReplacer("/", "-", " ", "_", ",", "").Replace(p.String()), func(t *testing.T) {
			e := start(t)
			// A VM whose link drops while mgmtctl waits for it to boot
			// looks like one still booting: the run waits out its bound
			// (--wait-timeout), saying what it waits for, then fails.
			var args []string
			bound := 60 * time.Second
			switch {
			case p.Phase == "vm" && p.Step == "wait-ssh":
				args, bound = []string{"--wait-timeout", "45s"}, 75*time.Second
			case p.Phase == "vm":
				// The node's link: the keepalives' bound (spec.ssh's
				// default, one every 10 s and 3 unanswered: 30 to 40 s),
				// and no second wait on the dead link after it, a cleanup
				// command's included.
				bound = 45 * time.Second
			}
			// The internet gone while the cluster itself fetches from it
			// (helm-controller a chart, the operator a release): the
			// cluster retries, and the run reports each failed attempt
			// as it waits out its bound, then fails with the last one.
			if p.Drop == "mirror" && (p.Phase == "addons" || p.Phase == "capi") {
				args, bound = []string{"--wait-timeout", "90s"}, 2*time.Minute
			}
			d := e.dropWhen(p.Drop, func(ev runEvent) bool {
				return ev.Event == "step-start" && ev.Phase == p.Phase && ev.Step == p.Step && (ev.Host == p.StepHost || ev.Host == "" && p.StepHost == "every host")
			}, 5*time.Minute, args...)
			if !d.At {
				t.Fatalf("never reached:\n%s", d.Stderr)
			}
			switch {
			case d.Code == 0:
				t.Logf("the run did not need %s again and succeeded (%v after the drop)", p.Drop, d.Detected.Round(time.Second))
			case d.Code != 1 && d.Code != 4:
				t.Errorf("exit %d after %v:\n%s", d.Code, d.Detected, d.Stderr)
			case !strings.Contains(d.Stderr, "error: "):
				t.Errorf("exit %d with no error:\n%s", d.Code, d.Stderr)
			default:
				t.Logf("failed %v after the drop, exit %d: %s", d.Detected.Round(time.Second), d.Code, firstLine(d.Stderr, "error: "))
				if d.Detected > slowest {
					slowest = d.Detected
				}
				if d.Detected > bound {
					t.Errorf("took %v to fail", d.Detected)
				}
			}
			if err := e.SetFault("drop-connections", "", false); err != nil {
				t.Fatal(err)
			}
			mustSucceed(t, e.apply(), "apply once the link is back")
			if got := recap(t, e.apply()); !strings.Contains(got, "changed=0") {
				t.Errorf("a further run: %s", got)
			}
			if n := strings.Count(e.PVE("qm list").Stdout, "\n"); n != 2 {
				t.Errorf("qm list has %d lines, want a header and one VM", n)
			}
			e.noHalfWrittenFiles()
		})
		if ok {
			held++
		} else {
			failed++
		}
	}
	t.Logf("%d drop points held, %d failed; slowest detection %v", held, failed, slowest.Round(time.Second))
}

func firstLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// laptopTemp is localfile's temporary name: os.CreateTemp's ".<name>-*".
var laptopTemp = regexp.MustCompile(`^\..+-[0-9]{6,}$`)

// noHalfWrittenFiles fails on a temporary file mgmtctl's writes leave
// beside their target until the rename (remote.WriteFile's .mgmtctl.*,
// the image download's *.mgmtctl-*, the laptop's .<name>-*) anywhere on
// the node's, the VM's or the laptop's disk.
func (e *env) noHalfWrittenFiles() {
	e.t.Helper()
	roots := []string{filepath.Join(e.HostDisk("pve"), "upper"), filepath.Join(e.VMDisk(lab.VMID), "upper"), e.LaptopHome()}
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			n := d.Name()
			if strings.HasPrefix(n, ".mgmtctl.") || strings.Contains(n, ".mgmtctl-") || laptopTemp.MatchString(n) {
				e.t.Errorf("a half-written file is left: %s", p)
			}
			return nil
		})
	}
}

// TestHADropDuringRollingUpgrade: three servers, a k3s version bump rolls
// one server at a time; the second server's link goes down while its
// upgrade runs. The run stops there, clearly, within 60 s (the roll never
// goes on to the third server with the second one's state unknown), the
// API still answers at the VIP from the two others (quorum kept), and once
// the link is back one apply finishes the roll and the next changes
// nothing. Part of make drop-points (MGMTCTL_DROP_POINTS=1).
func TestHADropDuringRollingUpgrade(t *testing.T) {
	t.Parallel()
	if os.Getenv("MGMTCTL_DROP_POINTS") == "" {
		t.Skip("part of the drop points: run with MGMTCTL_DROP_POINTS=1 (make drop-points)")
	}
	e := startHA(t)
	mustSucceed(t, e.apply(), "first apply")
	e.editConfig("  kubeconfig:", "  k3s:\n    version: v1.36.3+k3s1\n  kubeconfig:")
	second := "vm" + strconv.Itoa(lab.VMID+1)
	d := e.dropWhen(second, func(ev runEvent) bool {
		return ev.Event == "progress" && ev.Phase == "k3s" && ev.Step == "install" && ev.Host == "lab-mgmt-2"
	}, 3*time.Minute)
	if !d.At {
		t.Fatalf("the second server's upgrade never started:\n%s\n%s", d.Stdout, d.Stderr)
	}
	t.Logf("the run ended %v after the drop: exit %d\n%s", d.Detected.Round(time.Second), d.Code, d.Stderr)
	if d.Code != 4 || d.Detected > 60*time.Second || !strings.Contains(d.Stderr, "lost the connection to lab-mgmt-2 (192.0.2.51:22)") {
		t.Errorf("exit %d after %v", d.Code, d.Detected)
	}
	if strings.Contains(d.Stdout, `"step":"install","host":"lab-mgmt-3"`) {
		t.Errorf("the roll went on to the third server")
	}
	if r := e.viaVIP("get", "--raw", "/readyz"); r.Code != 0 {
		t.Errorf("the API at the VIP with the second server cut off: %+v", r)
	}
	if err := e.SetFault("drop-connections", "", false); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, e.apply(), "apply once the link is back")
	if r := e.viaVIP("get", "nodes", "-o", "jsonpath={range .items[*]}{.status.nodeInfo.kubeletVersion} {end}"); r.Stdout != "v1.36.3+k3s1 v1.36.3+k3s1 v1.36.3+k3s1 " {
		t.Errorf("versions after the roll: %+v", r)
	}
	if got := recap(t, e.apply()); !strings.Contains(got, "changed=0") {
		t.Errorf("a further run: %s", got)
	}
}

package proxmox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/remote/remotetest"
	"github.com/mgmtctl/mgmtctl/internal/shell"
	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

// TestApplyRunsThePlan: each step's plan holds exactly the effects it
// needs, and carrying it out (as a run does: step.CarryOut) does exactly
// those on the node, in order: one effect more or fewer fails. What the
// steps read to decide, and the facts they read back, are not among them.
func TestApplyRunsThePlan(t *testing.T) {
	download := remote.Script("", downloadScript, spec().ImageURL, "/var/lib/vz/template/iso/noble-server-cloudimg-amd64.img", "0123abcd")
	for _, tc := range []struct {
		name  string
		step  func(n *Node) step.Step
		facts func(n *Node)
		// answer is what the node answers (remotetest.EmptyBatch when
		// nil): the facts a step reads back.
		answer func(remote.Cmd) (remote.Result, error)
		// plan is the plan's effects; want what the node saw done.
		plan, want []string
	}{
		{name: "image", step: func(n *Node) step.Step { return &Image{N: n} },
			facts: func(n *Node) { n.Spec.ImageSHA256 = "0123abcd" },
			// Its sum is read back once downloaded.
			answer: remotetest.Batch(map[string]string{"sh -c 'if read -r sum ": "0123abcd\n"}),
			plan:   []string{"on pve: download " + spec().ImageURL},
			want:   []string{"run " + download.String()}},
		{name: "grow-disk", step: func(n *Node) step.Step { return &GrowDisk{N: n} },
			facts: func(n *Node) {
				n.Facts.VMExists, n.Facts.Config = true, ParseConfig("scsi0: local-lvm:vm-110-disk-0,size=3584M\n")
			},
			// qm resize exits 0 whatever its worker did: the size is
			// read back, and it is the plan's.
			answer: remotetest.Batch(map[string]string{"qm config": "scsi0: local-lvm:vm-110-disk-0,size=30G\n"}),
			plan:   []string{"on pve: qm resize 110 scsi0 30G"},
			want:   []string{"run qm resize 110 scsi0 30G"}},
		{name: "start-vm", step: func(n *Node) step.Step { return &StartVM{N: n} },
			facts: func(n *Node) { n.Facts.VMExists = true },
			plan:  []string{"on pve: qm start 110"},
			want:  []string{"run qm start 110"}},
		{name: "destroy-vm", step: func(n *Node) step.Step { return &DestroyVM{N: n} },
			facts: func(n *Node) {
				n.Facts.VMExists, n.Facts.Running, n.Facts.Config = true, true, map[string]string{"name": "lab-mgmt", "tags": "mgmtctl"}
			},
			plan: []string{"on pve: qm stop 110", "on pve: qm destroy 110 --purge"},
			want: []string{"run qm stop 110", "run qm destroy 110 --purge"}},
		{name: "wait-ssh", step: func(n *Node) step.Step { return hungVM(n) },
			facts: func(n *Node) { n.Facts.VMExists, n.Facts.Running, n.Facts.Uptime = true, true, time.Hour },
			plan:  []string{"on pve: qm reset 110"},
			want:  []string{"run qm reset 110"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &remotetest.Host{HostName: "pve", Answer: remotetest.EmptyBatch}
			if tc.answer != nil {
				h.Answer = tc.answer
			}
			n := &Node{Spec: spec(), Host: h}
			if tc.facts != nil {
				tc.facts(n)
			}
			s := tc.step(n)
			p, err := s.Check(context.Background())
			if err != nil || len(p.Changes) != 1 {
				t.Fatalf("plan: %+v, %v", p, err)
			}
			if got := steptest.Effects(p); !reflect.DeepEqual(got, tc.plan) {
				t.Errorf("plan %q, want %q", got, tc.plan)
			}
			if err := step.CarryOut(context.Background(), s, p, steptest.Executor(nil, h)); err != nil {
				t.Fatalf("carry out: %v", err)
			}
			// Exactly the plan: one effect more (or fewer) fails.
			if got := h.Effects(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("did %q, want %q", got, tc.want)
			}
		})
	}
}

// record is a NewVMRecord in memory: gaveUp ago, if set.
type record struct {
	never  bool
	gaveUp time.Duration
}

func (r *record) NeverReached() bool { return r.never }
func (r *record) GaveUpAt() (time.Time, bool) {
	return time.Now().Add(-r.gaveUp), r.gaveUp != 0
}

// hungVM is the wait-ssh step of a VM that never answers and that mgmtctl
// created and never reached.
func hungVM(n *Node) *Reachable {
	return &Reachable{N: n, Record: &record{never: true}, Timeout: time.Minute,
		Dial: func(ctx context.Context, wait bool) (remote.Reader, error) {
			return nil, &remote.UnreachableError{Host: "vm", Addr: "192.0.2.50:22", Attempts: 1, Err: errors.New("no route to host")}
		}}
}

// TestResetOnlyAVMThatNeverBooted: wait-ssh resets a VM only when mgmtctl
// made it, never reached it, it has run past the bound and still does not
// answer; a VM that answered once is never reset (it may hold the cluster).
func TestResetOnlyAVMThatNeverBooted(t *testing.T) {
	answers := func(ctx context.Context, wait bool) (remote.Reader, error) {
		return &remotetest.Host{HostName: "vm"}, nil
	}
	for _, tc := range []struct {
		name   string
		uptime time.Duration
		rec    record
		dial   VMDialer
		reset  bool
	}{
		{name: "a run gave up on this boot", uptime: 30 * time.Second, rec: record{never: true, gaveUp: time.Second}, reset: true},
		{name: "up past the bound", uptime: 2 * time.Minute, rec: record{never: true}, reset: true},
		{name: "still within its boot time", uptime: 30 * time.Second, rec: record{never: true}},
		{name: "reached before", uptime: time.Hour, rec: record{never: false, gaveUp: time.Second}},
		{name: "answers now", uptime: time.Hour, rec: record{never: true, gaveUp: time.Second}, dial: answers},
		// This run's start-vm (or a start by hand) booted it after the
		// run that gave up: it is booting, not hung.
		{name: "started since a run gave up", uptime: 5 * time.Second, rec: record{never: true, gaveUp: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &Node{Spec: spec(), Host: &remotetest.Host{HostName: "pve"}}
			n.Facts.VMExists, n.Facts.Running, n.Facts.Uptime, n.Facts.At = true, true, tc.uptime, time.Now()
			s := hungVM(n)
			s.Record = &tc.rec
			if tc.dial != nil {
				s.Dial = tc.dial
			}
			p, err := s.Check(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := !p.Empty(); got != tc.reset {
				t.Fatalf("reset planned = %v, want %v: %+v", got, tc.reset, p)
			}
			if tc.reset && (!reflect.DeepEqual(steptest.Effects(p), []string{"on pve: qm reset 110"}) || !strings.Contains(p.Changes[0].Summary, "never answered SSH since mgmtctl created it (no route to host)")) {
				t.Errorf("plan: %+v", p.Changes[0])
			}
		})
	}
}

// TestWaitSSHAtItsBound: a VM silent until the wait's deadline fails with
// what was last seen, where to look and what the next run does; the error
// is still an unreachable host's (exit 4).
func TestWaitSSHAtItsBound(t *testing.T) {
	n := &Node{Spec: spec(), Host: &remotetest.Host{HostName: "pve"}}
	s := hungVM(n)
	s.Dial = func(ctx context.Context, wait bool) (remote.Reader, error) {
		<-ctx.Done()
		return nil, &remote.UnreachableError{Host: "vm", Addr: "192.0.2.50:22", Attempts: 9, Err: errors.New("connect: no route to host")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := s.Wait(ctx)
	for _, want := range []string{"VM 110 is running but did not answer SSH on 192.0.2.50:22 within 1m0s", "no route to host (after 9 attempts)",
		"qm terminal 110 on pve", "the next apply resets it (qm reset 110)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if !remote.IsUnreachable(err) {
		t.Errorf("not an unreachable host's error: %v", err)
	}
	// The session records it for the next run, told by the error's type.
	var na *NeverAnsweredError
	if !errors.As(err, &na) || na.VMID != "110" {
		t.Errorf("not a *NeverAnsweredError of VM 110: %#v", err)
	}
}

// TestDestroyOnlyMgmtctlsVM: destroy stops a running VM and destroys it
// with its disks; a VM without mgmtctl's name and tag is refused; an
// absent one is already destroyed.
func TestDestroyOnlyMgmtctlsVM(t *testing.T) {
	for _, tc := range []struct {
		name    string
		exists  bool
		running bool
		config  map[string]string
		want    []string
		err     string
	}{
		{name: "absent"},
		{name: "running", exists: true, running: true, config: map[string]string{"name": "lab-mgmt", "tags": "mgmtctl"}, want: []string{"qm stop 110", "qm destroy 110 --purge"}},
		{name: "stopped, more tags", exists: true, config: map[string]string{"name": "lab-mgmt", "tags": "k8s;mgmtctl"}, want: []string{"qm destroy 110 --purge"}},
		{name: "another name", exists: true, config: map[string]string{"name": "db", "tags": "mgmtctl"}, err: `VM 110 on pve is not mgmtctl's (name "db", tags "mgmtctl"`},
		{name: "no tag", exists: true, config: map[string]string{"name": "lab-mgmt"}, err: "refusing to touch it; nothing was removed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &Node{Spec: spec()}
			n.Facts.VMExists, n.Facts.Running, n.Facts.Config = tc.exists, tc.running, tc.config
			p, err := (&DestroyVM{N: n}).Check(context.Background())
			if tc.err != "" {
				var fe *ForeignVMError
				if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range steptest.Effects(p) {
				got = append(got, strings.TrimPrefix(e, "on pve: "))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("commands %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCreateVMRecordsThePlannedMarker: the laptop's record of a new VM is
// part of the create plan (its summary names it) and is written where the
// plan says, before qm create; the key file goes even when qm fails.
func TestCreateVMRecordsThePlannedMarker(t *testing.T) {
	for _, qmFails := range []bool{false, true} {
		t.Run(fmt.Sprintf("qm fails=%v", qmFails), func(t *testing.T) {
			h := &remotetest.Host{HostName: "pve", Answer: remotetest.EmptyBatch}
			if qmFails {
				h.Answer = func(c remote.Cmd) (remote.Result, error) {
					if len(c.Args) > 1 && c.Args[1] == "create" {
						return remote.Result{}, &remote.ExitError{Host: "pve", Cmd: "qm create", Code: 2, Stderr: "unable to create VM 110"}
					}
					return remotetest.EmptyBatch(c)
				}
			}
			marker := filepath.Join(t.TempDir(), "mgmtctl", "new-vm-110")
			// An earlier VM's key at the address: the new VM's replaces it.
			kh := filepath.Join(t.TempDir(), "known_hosts")
			os.WriteFile(kh, []byte("192.0.2.50 ssh-ed25519 AAAAold\n192.0.2.60 ssh-ed25519 AAAAother\n"), 0o600)
			s := &CreateVM{N: &Node{Spec: spec(), Host: h}, AuthorizedKey: "ssh-ed25519 AAAA laptop", Marker: marker, MarkerContent: []byte("u@laptop pid 1\n"),
				KnownHosts: kh, Addr: "192.0.2.50:22"}
			p, err := s.Check(context.Background())
			if err != nil || len(p.Changes) != 1 || !strings.Contains(p.Changes[0].Summary, "record it as new in "+marker) ||
				!strings.Contains(p.Changes[0].Diff.After, "rm -f -- /root/.mgmtctl-sshkeys-110.pub") {
				t.Fatalf("plan: %+v %v", p, err)
			}
			create, _ := shell.Join(s.CreateArgs()...)
			// Strict: the marker first, the earlier key forgotten, then
			// the key file, qm create and the key file's removal, each
			// once, and nothing else.
			want := []string{"write " + marker + " (15 bytes, 0600)", "remove 192.0.2.50:22 from " + kh, "on pve: write /root/.mgmtctl-sshkeys-110.pub (24 bytes, 0600)",
				"on pve: " + create, "on pve: rm -f -- /root/.mgmtctl-sshkeys-110.pub (whatever happened before)"}
			if got := steptest.Effects(p); !reflect.DeepEqual(got, want) {
				t.Errorf("plan:\n%q\nwant\n%q", got, want)
			}
			err = step.CarryOut(context.Background(), s, p, steptest.Executor(nil, h))
			if qmFails != (err != nil) || qmFails && !strings.Contains(err.Error(), "create VM 110: qm create exited 2") {
				t.Fatalf("carry out: %v", err)
			}
			if b, err := os.ReadFile(marker); err != nil || string(b) != "u@laptop pid 1\n" {
				t.Errorf("marker: %q %v", b, err)
			}
			if b, _ := os.ReadFile(kh); string(b) != "192.0.2.60 ssh-ed25519 AAAAother\n" {
				t.Errorf("known_hosts: %q", b)
			}
			if got, want := h.Effects(), []string{"write /root/.mgmtctl-sshkeys-110.pub", "run " + create, "run rm -f -- /root/.mgmtctl-sshkeys-110.pub"}; !reflect.DeepEqual(got, want) {
				t.Errorf("on the node:\n%q\nwant\n%q", got, want)
			}
		})
	}
}

// TestImageReadBack: once downloaded, the image's sum is read from the
// node again; a node that then shows another sum (or none) fails the
// step rather than leave the next steps a fact nobody read.
func TestImageReadBack(t *testing.T) {
	for _, shown := range []string{"", "ffff0000\n"} {
		h := &remotetest.Host{HostName: "pve", Answer: remotetest.Batch(map[string]string{"sh -c 'if read -r sum ": shown})}
		n := &Node{Spec: spec(), Host: h}
		n.Spec.ImageSHA256 = "0123abcd"
		s := &Image{N: n}
		p, err := s.Check(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		err = step.CarryOut(context.Background(), s, p, steptest.Executor(nil, h))
		if err == nil || !strings.Contains(err.Error(), "downloaded, but the node then showed it with sha256") {
			t.Errorf("shown %q: %v", shown, err)
		}
	}
}

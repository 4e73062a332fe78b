package proxmox

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/remote/remotetest"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// TestApplyRunsThePlan: what each step's plan carries is what its Apply
// runs or writes, nothing recomputed: the payload is changed after Check,
// and Apply must carry out the changed one.
func TestApplyRunsThePlan(t *testing.T) {
	marked := remote.Command("echo", "planned")
	for _, tc := range []struct {
		name  string
		step  func(n *Node) step.Step
		facts func(n *Node)
		// tamper replaces the plan's payload with a marked one.
		tamper func(c *step.Change)
		// answer is what the node answers (remotetest.EmptyBatch when
		// nil): the facts Apply reads back.
		answer func(remote.Cmd) (remote.Result, error)
		want   []string
	}{
		{name: "image", step: func(n *Node) step.Step { return &Image{N: n} },
			facts:  func(n *Node) { n.Spec.ImageSHA256 = "0123abcd" },
			tamper: func(c *step.Change) { c.Payload = marked },
			want:   []string{"run echo planned"}},
		{name: "create-vm", step: func(n *Node) step.Step { return &CreateVM{N: n, AuthorizedKey: "ssh-ed25519 AAAA laptop"} },
			tamper: func(c *step.Change) {
				cr := c.Payload.(Creation)
				cr.Keys.Path, cr.Create, cr.Cleanup = "/root/planned.pub", marked, remote.Command("echo", "cleaned")
				c.Payload = cr
			},
			want: []string{"write /root/planned.pub", "run echo planned", "run echo cleaned"}},
		{name: "grow-disk", step: func(n *Node) step.Step { return &GrowDisk{N: n} },
			facts: func(n *Node) {
				n.Facts.VMExists, n.Facts.Config = true, ParseConfig("scsi0: local-lvm:vm-110-disk-0,size=3584M\n")
			},
			tamper: func(c *step.Change) { c.Payload = marked },
			// qm resize exits 0 whatever its worker did: Apply reads the
			// size back, which is the plan's.
			answer: remotetest.Batch(map[string]string{"qm config": "scsi0: local-lvm:vm-110-disk-0,size=30G\n"}),
			want:   []string{"run echo planned"}},
		{name: "start-vm", step: func(n *Node) step.Step { return &StartVM{N: n} },
			facts:  func(n *Node) { n.Facts.VMExists = true },
			tamper: func(c *step.Change) { c.Payload = marked },
			want:   []string{"run echo planned"}},
		{name: "destroy-vm", step: func(n *Node) step.Step { return &DestroyVM{N: n} },
			facts: func(n *Node) {
				n.Facts.VMExists, n.Facts.Running, n.Facts.Config = true, true, map[string]string{"name": "lab-mgmt", "tags": "mgmtctl"}
			},
			tamper: func(c *step.Change) { c.Payload = []remote.Cmd{marked} },
			want:   []string{"run echo planned"}},
		{name: "wait-ssh", step: func(n *Node) step.Step { return hungVM(n) },
			facts:  func(n *Node) { n.Facts.VMExists, n.Facts.Running, n.Facts.Uptime = true, true, time.Hour },
			tamper: func(c *step.Change) { c.Payload = marked },
			want:   []string{"run echo planned"}},
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
			if err != nil || len(p.Changes) != 1 || p.Changes[0].Payload == nil {
				t.Fatalf("plan: %+v, %v", p, err)
			}
			tc.tamper(&p.Changes[0])
			if err := s.Apply(context.Background(), p); err != nil {
				t.Fatalf("apply: %v", err)
			}
			// Exactly the plan: one effect more (or fewer) fails.
			if got := h.Effects(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("applied %q, want %q", got, tc.want)
			}
		})
	}
}

// record is a NewVMRecord in memory.
type record struct{ never, gaveUp bool }

func (r *record) NeverReached() bool  { return r.never }
func (r *record) GaveUp() bool        { return r.gaveUp }
func (r *record) RecordGaveUp() error { r.gaveUp = true; return nil }

// hungVM is the wait-ssh step of a VM that never answers and that mgmtctl
// created and never reached.
func hungVM(n *Node) *Reachable {
	return &Reachable{N: n, Record: &record{never: true}, Timeout: time.Minute,
		Dial: func(ctx context.Context, wait bool) (remote.Host, error) {
			return nil, &remote.UnreachableError{Host: "vm", Addr: "192.0.2.50:22", Attempts: 1, Err: errors.New("no route to host")}
		}}
}

// TestResetOnlyAVMThatNeverBooted: wait-ssh resets a VM only when mgmtctl
// made it, never reached it, it has run past the bound and still does not
// answer; a VM that answered once is never reset (it may hold the cluster).
func TestResetOnlyAVMThatNeverBooted(t *testing.T) {
	answers := func(ctx context.Context, wait bool) (remote.Host, error) {
		return &remotetest.Host{HostName: "vm"}, nil
	}
	for _, tc := range []struct {
		name   string
		uptime time.Duration
		rec    record
		dial   VMDialer
		start  bool // this run started it
		reset  bool
	}{
		{name: "a run gave up on it", uptime: 30 * time.Second, rec: record{never: true, gaveUp: true}, reset: true},
		{name: "up past the bound", uptime: 2 * time.Minute, rec: record{never: true}, reset: true},
		{name: "still within its boot time", uptime: 30 * time.Second, rec: record{never: true}},
		{name: "reached before", uptime: time.Hour, rec: record{never: false, gaveUp: true}},
		{name: "answers now", uptime: time.Hour, rec: record{never: true, gaveUp: true}, dial: answers},
		{name: "started by this run", uptime: time.Hour, rec: record{never: true, gaveUp: true}, start: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &Node{Spec: spec(), Host: &remotetest.Host{HostName: "pve"}, Started: tc.start}
			n.Facts.VMExists, n.Facts.Running, n.Facts.Uptime = true, true, tc.uptime
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
			if tc.reset && (p.Changes[0].Payload.(remote.Cmd).String() != "qm reset 110" || !strings.Contains(p.Changes[0].Summary, "never answered SSH since mgmtctl created it (no route to host)")) {
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
	s.Dial = func(ctx context.Context, wait bool) (remote.Host, error) {
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
	if !s.Record.GaveUp() {
		t.Error("the wait that gave up is not recorded for the next run")
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
			if !p.Empty() {
				for _, c := range p.Changes[0].Payload.([]remote.Cmd) {
					got = append(got, c.String())
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("commands %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCreateVMRecordsThePlannedMarker: the laptop's record of a new VM is
// part of the create plan (its summary names it) and is written where the
// plan says, before qm create.
func TestCreateVMRecordsThePlannedMarker(t *testing.T) {
	var order []string
	h := &remotetest.Host{HostName: "pve", Answer: remotetest.EmptyBatch}
	s := &CreateVM{N: &Node{Spec: spec(), Host: h}, AuthorizedKey: "ssh-ed25519 AAAA laptop", Marker: "/home/u/.config/mgmtctl/new-vm-110",
		WriteMarker: func(p string) error {
			// Where the marker falls among the node's effects.
			order = append(order, fmt.Sprintf("marker %s (after %d effects on the node)", p, len(h.Effects())))
			return nil
		}}
	p, err := s.Check(context.Background())
	if err != nil || len(p.Changes) != 1 || !strings.Contains(p.Changes[0].Summary, "record it as new in /home/u/.config/mgmtctl/new-vm-110") ||
		!strings.Contains(p.Changes[0].Diff.After, "rm -f -- /root/.mgmtctl-sshkeys-110.pub") {
		t.Fatalf("plan: %+v %v", p, err)
	}
	cr := p.Changes[0].Payload.(Creation)
	cr.Marker = "/planned/marker"
	p.Changes[0].Payload = cr
	if err := s.Apply(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	order = append(order, h.Effects()...)
	// Strict: the marker first, then the key file, qm create and the key
	// file's removal, each once, and nothing else.
	want := []string{"marker /planned/marker (after 0 effects on the node)", "write /root/.mgmtctl-sshkeys-110.pub",
		"run " + cr.Create.String(), "run " + cr.Cleanup.String()}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("effects:\n%q\nwant\n%q", order, want)
	}
}

package k3s

import (
	"context"
	"net/netip"
	"reflect"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/remote/remotetest"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// TestApplyRunsThePlan: each step's Apply runs or writes its plan's payload,
// not a command or file of its own: the payload is replaced after Check,
// and Apply must carry out the replacement.
func TestApplyRunsThePlan(t *testing.T) {
	marked := remote.Command("echo", "planned")
	file := remote.File{Path: "/planned", Content: []byte("planned\n")}
	for _, tc := range []struct {
		name   string
		step   func(v *VM) step.Step
		facts  func(v *VM)
		tamper any
		// answer is what the VM answers (remotetest.EmptyBatch when
		// nil): the facts Apply reads back.
		answer func(remote.Cmd) (remote.Result, error)
		// files are the VM's files (none readable when nil).
		files map[string][]byte
		want  []string
	}{
		{name: "guest-agent", step: func(v *VM) step.Step { return &GuestAgent{V: v} }, tamper: marked,
			want: []string{"run echo planned", "run echo planned"}},
		{name: "config", step: func(v *VM) step.Step { return &Config{V: v} }, tamper: file, want: []string{"write /planned"}},
		{name: "install", step: func(v *VM) step.Step { return &Install{V: v} }, tamper: marked,
			// Apply reads the version back: the installed one is the plan's.
			answer: remotetest.Batch(map[string]string{"sh -c 'command -v k3s": "k3s version v1.35.7+k3s1 (8d0d2a5e)\ngo version go1.25.4\n", "systemctl is-active": "active\n"}),
			want:   []string{"run echo planned"}},
		{name: "restart-k3s", step: func(v *VM) step.Step { return &Restart{NodeReady: &NodeReady{V: v}} },
			facts: func(v *VM) { v.Installed = "v1.35.7+k3s1" }, tamper: marked, want: []string{"run echo planned"}},
		{name: "kube-vip", step: func(v *VM) step.Step { return &KubeVIP{V: v, Manifest: []byte("kind: DaemonSet\n")} },
			files: map[string][]byte{}, tamper: file, want: []string{"write /planned"}},
		{name: "cluster-token", step: func(v *VM) step.Step {
			seed := &VM{Spec: Spec{Name: "lab-mgmt"}, Host: &remotetest.Host{HostName: "lab-mgmt", Files: map[string][]byte{ServerTokenPath: []byte("K10seed::server:x\n")}}}
			return &ClusterToken{V: v, Seed: func() *VM { return seed }}
		}, files: map[string][]byte{}, tamper: file, want: []string{"write /planned"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &remotetest.Host{HostName: "lab-mgmt", Answer: remotetest.EmptyBatch}
			if tc.answer != nil {
				h.Answer = tc.answer
			}
			h.Files = tc.files
			v := &VM{Spec: Spec{Name: "lab-mgmt", IP: netip.MustParseAddr("192.0.2.50"), Version: config.K3sRelease{Major: 1, Minor: 35, Patch: 7, Build: 1}, InstallScriptURL: "https://get.k3s.io"}, Host: h}
			if tc.facts != nil {
				tc.facts(v)
			}
			s := tc.step(v)
			p, err := s.Check(context.Background())
			if err != nil || p.Empty() {
				t.Fatalf("plan: %+v, %v", p, err)
			}
			for i := range p.Changes {
				if p.Changes[i].Payload == nil {
					t.Fatalf("change %d has no payload: %+v", i, p.Changes[i])
				}
				p.Changes[i].Payload = tc.tamper
			}
			before := len(h.Effects())
			if err := s.Apply(context.Background(), p); err != nil {
				t.Fatalf("apply: %v", err)
			}
			// Exactly the plan: one effect more (or fewer) fails.
			if got := h.Effects()[before:]; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("applied %q, want %q", got, tc.want)
			}
		})
	}
}

// TestInstallNeverDowngrades: a newer k3s than pinned is refused, an older
// one upgraded, the pinned one left alone; release numbers compare as
// numbers (v1.35.10 is newer than v1.35.9).
func TestInstallNeverDowngrades(t *testing.T) {
	pin := config.K3sRelease{Major: 1, Minor: 35, Patch: 10, Build: 1}
	for _, tc := range []struct {
		installed, want string
	}{
		{"v1.36.3+k3s1", "error: k3s v1.36.3+k3s1 is installed, newer than the pinned v1.35.10+k3s1; k3s cannot be downgraded: set spec.k3s.version to v1.36.3+k3s1 or newer"},
		{"v1.35.10+k3s2", "error: k3s v1.35.10+k3s2 is installed, newer than the pinned v1.35.10+k3s1; k3s cannot be downgraded: set spec.k3s.version to v1.35.10+k3s2 or newer"},
		{"v1.35.9+k3s1", "upgrade k3s from v1.35.9+k3s1 to v1.35.10+k3s1"},
		{"v1.35.10+k3s1", "k3s v1.35.10+k3s1 installed"},
		{"", "install k3s v1.35.10+k3s1"},
	} {
		v := &VM{Spec: Spec{Name: "lab-mgmt", Version: pin}, Installed: tc.installed, Active: true}
		p, err := (&Install{V: v}).Check(context.Background())
		got := p.Note
		if len(p.Changes) > 0 {
			got = p.Changes[0].Summary
		}
		if err != nil {
			got = "error: " + err.Error()
		}
		if got != tc.want {
			t.Errorf("installed %q: got %q, want %q", tc.installed, got, tc.want)
		}
	}
}

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
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

// TestApplyRunsThePlan: each step's plan holds exactly the effects it
// needs, and carrying it out (as a run does: step.CarryOut) does exactly
// those on the VM, in order: one effect more or fewer fails. What the
// steps read to decide is not among them.
func TestApplyRunsThePlan(t *testing.T) {
	for _, tc := range []struct {
		name  string
		step  func(v *VM) step.Step
		facts func(v *VM)
		// answer is what the VM answers (remotetest.EmptyBatch when
		// nil): the facts the step reads back.
		answer func(remote.Cmd) (remote.Result, error)
		// files are the VM's files (none readable when nil).
		files map[string][]byte
		// plan is the plan's effects; want what the VM saw done.
		plan, want []string
	}{
		{name: "guest-agent", step: func(v *VM) step.Step { return &GuestAgent{V: v} },
			plan: []string{"on lab-mgmt: env DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-guest-agent (as root)", "on lab-mgmt: systemctl start qemu-guest-agent (as root)"},
			want: []string{"run env DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-guest-agent", "run systemctl start qemu-guest-agent"}},
		{name: "config", step: func(v *VM) step.Step { return &Config{V: v} }, files: map[string][]byte{},
			plan: []string{"on lab-mgmt: write /etc/rancher/k3s/config.yaml (161 bytes, 0600, root:root)"},
			want: []string{"write /etc/rancher/k3s/config.yaml"}},
		{name: "install", step: func(v *VM) step.Step { return &Install{V: v} },
			// The version is read back: the installed one is the plan's.
			answer: remotetest.Batch(map[string]string{"sh -c 'bin=$(command -v k3s)": "k3s version v1.35.7+k3s1 (8d0d2a5e)\ngo version go1.25.4\n", "systemctl is-active": "active\n"}),
			plan:   []string{"on lab-mgmt: install k3s v1.35.7+k3s1 with https://get.k3s.io (as root)"},
			want:   []string{"run " + remote.Script("", installScript, "https://get.k3s.io", "v1.35.7+k3s1").String()}},
		{name: "restart-k3s", step: func(v *VM) step.Step { return &Restart{NodeReady: &NodeReady{V: v}} },
			facts: func(v *VM) { v.Installed = "v1.35.7+k3s1" },
			plan:  []string{"on lab-mgmt: systemctl restart k3s (as root)"},
			want:  []string{"run systemctl restart k3s"}},
		{name: "kube-vip", step: func(v *VM) step.Step { return &KubeVIP{V: v, Manifest: []byte("kind: DaemonSet\n")} },
			files: map[string][]byte{},
			plan:  []string{"on lab-mgmt: write /var/lib/rancher/k3s/server/manifests/kube-vip.yaml (16 bytes, 0600, root:root)"},
			want:  []string{"write /var/lib/rancher/k3s/server/manifests/kube-vip.yaml"}},
		{name: "cluster-token", step: func(v *VM) step.Step {
			seed := &VM{Spec: Spec{Name: "lab-mgmt-1"}, Host: &remotetest.Host{HostName: "lab-mgmt-1", Files: map[string][]byte{ServerTokenPath: []byte("K10seed::server:x\n")}}}
			return &ClusterToken{V: v, Seed: func() *VM { return seed }}
		}, files: map[string][]byte{},
			plan: []string{"on lab-mgmt: write /etc/rancher/k3s/cluster-token (18 bytes, 0600, root:root)"},
			want: []string{"write /etc/rancher/k3s/cluster-token"}},
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
			if got := steptest.Effects(p); !reflect.DeepEqual(got, tc.plan) {
				t.Errorf("plan %q, want %q", got, tc.plan)
			}
			before := len(h.Effects())
			if err := step.CarryOut(context.Background(), s, p, steptest.Executor(nil, h)); err != nil {
				t.Fatalf("carry out: %v", err)
			}
			// Exactly the plan: one effect more (or fewer) fails.
			if got := h.Effects()[before:]; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("did %q, want %q", got, tc.want)
			}
		})
	}
}

// TestInstallNeverDowngrades: a newer k3s than pinned is refused, an older
// one upgraded (a minor at a time: one that skips a minor is refused), the
// pinned one left alone; release numbers compare as numbers (v1.35.10 is
// newer than v1.35.9).
func TestInstallNeverDowngrades(t *testing.T) {
	pin := config.K3sRelease{Major: 1, Minor: 35, Patch: 10, Build: 1}
	for _, tc := range []struct {
		installed, want string
	}{
		{"v1.36.3+k3s1", "error: k3s v1.36.3+k3s1 is installed on lab-mgmt, newer than the pinned v1.35.10+k3s1; k3s cannot be downgraded: set spec.k3s.version to v1.36.3+k3s1 or newer"},
		{"v1.35.10+k3s2", "error: k3s v1.35.10+k3s2 is installed on lab-mgmt, newer than the pinned v1.35.10+k3s1; k3s cannot be downgraded: set spec.k3s.version to v1.35.10+k3s2 or newer"},
		{"v1.35.9+k3s1", "upgrade k3s from v1.35.9+k3s1 to v1.35.10+k3s1"},
		{"v1.34.10+k3s1", "upgrade k3s from v1.34.10+k3s1 to v1.35.10+k3s1"},
		{"v1.33.5+k3s1", "error: k3s v1.33.5+k3s1 is installed on lab-mgmt; the pinned v1.35.10+k3s1 skips v1.34: k3s, as Kubernetes, upgrades one minor version at a time: pin the newest v1.34 release, apply, then v1.35.10+k3s1"},
		{"v1.35.10+k3s1", "k3s v1.35.10+k3s1 installed"},
		{"", "install k3s v1.35.10+k3s1"},
	} {
		v := &VM{Spec: Spec{Name: "lab-mgmt", Version: pin}, Installed: tc.installed, Active: true}
		if got := installSays(v); got != tc.want {
			t.Errorf("installed %q: got %q, want %q", tc.installed, got, tc.want)
		}
	}
}

// TestInstallLeavesARestoreAlone: a stopped k3s is started again by the
// installer, unless a restore that did not finish holds it down (masked):
// starting that server would bring back a member of the replaced cluster.
func TestInstallLeavesARestoreAlone(t *testing.T) {
	pin := config.K3sRelease{Major: 1, Minor: 35, Patch: 10, Build: 1}
	for _, tc := range []struct {
		active, masked bool
		want           string
	}{
		{false, false, "re-run the k3s v1.35.10+k3s1 installer: the k3s service is not running"},
		{false, true, "error: k3s on lab-mgmt-2 is held stopped (masked) by a restore that did not finish: run mgmtctl restore again to finish it"},
		{true, false, "k3s v1.35.10+k3s1 installed"},
	} {
		file := "enabled\n"
		if tc.masked {
			file = MaskedRuntime + "\n"
		}
		h := &remotetest.Host{HostName: "lab-mgmt-2", Answer: func(remote.Cmd) (remote.Result, error) { return remote.Result{Stdout: []byte(file)}, nil }}
		v := &VM{Spec: Spec{Name: "lab-mgmt-2", Version: pin}, Host: h, Installed: "v1.35.10+k3s1", Active: tc.active}
		if got := installSays(v); got != tc.want {
			t.Errorf("active %v, masked %v: got %q, want %q", tc.active, tc.masked, got, tc.want)
		}
	}
}

// installSays is what the install step's Check says on v: its first
// change's summary, its note, or "error: " and its error.
func installSays(v *VM) string {
	p, err := (&Install{V: v}).Check(context.Background())
	switch {
	case err != nil:
		return "error: " + err.Error()
	case len(p.Changes) > 0:
		return p.Changes[0].Summary
	}
	return p.Note
}

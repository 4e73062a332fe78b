package proxmox

import (
	"context"
	"reflect"
	"testing"

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
		want   []string
	}{
		{name: "image", step: func(n *Node) step.Step { return &Image{N: n} },
			facts:  func(n *Node) { n.Spec.ImageSHA256 = "0123abcd" },
			tamper: func(c *step.Change) { c.Payload = marked },
			want:   []string{"run echo planned"}},
		{name: "create-vm", step: func(n *Node) step.Step { return &CreateVM{N: n, AuthorizedKey: "ssh-ed25519 AAAA laptop"} },
			tamper: func(c *step.Change) {
				cr := c.Payload.(Creation)
				cr.Keys.Path, cr.Create = "/root/planned.pub", marked
				c.Payload = cr
			},
			want: []string{"write /root/planned.pub", "run echo planned", "run rm -f -- /root/planned.pub"}},
		{name: "grow-disk", step: func(n *Node) step.Step { return &GrowDisk{N: n} },
			facts: func(n *Node) {
				n.Facts.VMExists, n.Facts.Config = true, ParseConfig("scsi0: local-lvm:vm-110-disk-0,size=3584M\n")
			},
			tamper: func(c *step.Change) { c.Payload = marked },
			want:   []string{"run echo planned"}},
		{name: "start-vm", step: func(n *Node) step.Step { return &StartVM{N: n} },
			facts:  func(n *Node) { n.Facts.VMExists = true },
			tamper: func(c *step.Change) { c.Payload = marked },
			want:   []string{"run echo planned"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &remotetest.Host{HostName: "pve", Answer: remotetest.EmptyBatch}
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
			_ = s.Apply(context.Background(), p) // the node answers nothing: facts read back may not parse
			var got []string
			for _, e := range h.Events() {
				if e != "run "+batchCmd(h) {
					got = append(got, e)
				}
			}
			if len(got) > len(tc.want) {
				got = got[:len(tc.want)]
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("applied %q, want %q", got, tc.want)
			}
		})
	}
}

// batchCmd is the facts batch the node's Gather runs after a change, which
// is not part of the plan.
func batchCmd(h *remotetest.Host) string {
	for _, c := range h.Ran() {
		if len(c.Args) == 3 && c.Args[0] == "sh" && c.ReadOnly {
			return c.String()
		}
	}
	return ""
}

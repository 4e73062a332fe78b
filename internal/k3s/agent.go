package k3s

import (
	"context"
	"fmt"
	"strings"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// GuestAgent installs qemu-guest-agent and makes sure its service runs, so
// Proxmox can talk to the VM (and mgmtctl can cross-check its host key).
type GuestAgent struct{ V *VM }

var _ step.Step = (*GuestAgent)(nil)

// ID implements step.Step.
func (s *GuestAgent) ID() string { return "guest-agent" }

// Independent implements step.Independent: its Check reads the package and the service on the VM,
// nothing an earlier step left.
func (s *GuestAgent) Independent() {}

// Host implements step.Step.
func (s *GuestAgent) Host() string { return s.V.Name() }

func (s *GuestAgent) state(ctx context.Context) (installed, active bool, err error) {
	res, err := remote.Batch(ctx, s.V.Host, false,
		remote.PackageStatus("qemu-guest-agent"),
		remote.ServiceActive("qemu-guest-agent"),
	)
	if err != nil {
		return false, false, fmt.Errorf("check qemu-guest-agent: %w", err)
	}
	return strings.TrimSpace(string(res[0].Stdout)) == "install ok installed", strings.TrimSpace(string(res[1].Stdout)) == "active", nil
}

// Check implements step.Step.
func (s *GuestAgent) Check(ctx context.Context) (step.Plan, error) {
	var installed, active bool
	if s.V.Host != nil { // nil: a check run before the VM exists
		var err error
		if installed, active, err = s.state(ctx); err != nil {
			return step.Plan{}, err
		}
	}
	var p step.Plan
	if !installed {
		p.Changes = append(p.Changes, step.Change{Target: "qemu-guest-agent", Action: step.Create, Summary: "install qemu-guest-agent",
			Effects: []effect.Effect{s.V.run(remote.Command("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", "qemu-guest-agent").AsRoot())}})
	}
	if !active {
		p.Changes = append(p.Changes, step.Change{Target: "qemu-guest-agent.service", Action: step.Run, Summary: "start qemu-guest-agent",
			Effects: []effect.Effect{s.V.run(remote.Command("systemctl", "start", "qemu-guest-agent").AsRoot())}})
	}
	if p.Empty() {
		p.Note = "qemu-guest-agent installed and running"
	}
	return p, nil
}

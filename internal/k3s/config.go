package k3s

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// RenderConfig is /etc/rancher/k3s/config.yaml: traefik disabled (the
// management cluster serves no ingress), the VM's IP in the serving
// certificate so a kubeconfig pointing at it verifies, and an admin
// kubeconfig readable by root only.
func RenderConfig(vmIP string) []byte {
	var b bytes.Buffer
	b.WriteString("# Managed by mgmtctl: changes are overwritten on the next apply.\n")
	b.WriteString("disable:\n  - traefik\n")
	fmt.Fprintf(&b, "tls-san:\n  - %q\n", vmIP)
	b.WriteString("write-kubeconfig-mode: \"0600\"\n")
	return b.Bytes()
}

// Config writes config.yaml when it differs and notifies the restart
// handler.
type Config struct{ V *VM }

var _ step.Step = (*Config)(nil)

// ID implements step.Step.
func (s *Config) ID() string { return "config" }

// Host implements step.Step.
func (s *Config) Host() string { return s.V.Name() }

func (s *Config) want() []byte {
	return RenderConfig(s.V.Spec.IP.String())
}

// Check implements step.Step.
func (s *Config) Check(ctx context.Context) (step.Plan, error) {
	var cur []byte
	err := fs.ErrNotExist
	if s.V.Host != nil { // nil: a check run before the VM exists
		cur, err = s.V.ro().ReadFile(ctx, ConfigPath, true)
	}
	action := step.Update
	if errors.Is(err, fs.ErrNotExist) {
		action, cur, err = step.Create, nil, nil
	}
	if err != nil {
		return step.Plan{}, err
	}
	want := s.want()
	if bytes.Equal(cur, want) {
		return step.Plan{Note: ConfigPath + " up to date"}, nil
	}
	return step.Plan{
		Changes: []step.Change{{Target: ConfigPath, Action: action, Summary: action.String() + " " + ConfigPath,
			Diff:    &step.Diff{Path: ConfigPath, Before: string(cur), After: string(want)},
			Payload: remote.File{Path: ConfigPath, Content: want, Mode: 0o600, Owner: "root:root", Sudo: true}}},
		Notify: []string{RestartHandler},
	}, nil
}

// Apply implements step.Step: it writes the planned file. It is the
// example of a file step: the bytes --diff shows are the bytes written.
func (s *Config) Apply(ctx context.Context, p step.Plan) error {
	_, err := s.V.Host.WriteFile(ctx, p.Changes[0].Payload.(remote.File))
	return err
}

// Restart is the handler that restarts k3s once at the end of the phase
// after its config changed; k3s reads config.yaml only when it starts. It
// does nothing when k3s was not installed before this run, or when the
// installer just (re)started it with the new config. Like node-ready, it
// then waits for the node (it is a step.Waiter through Ready).
type Restart struct {
	V *VM
	// Ready is waited for after the restart.
	*NodeReady
}

var _ step.Waiter = (*Restart)(nil)

// ID implements step.Step.
func (s *Restart) ID() string { return RestartHandler }

// Host implements step.Step.
func (s *Restart) Host() string { return s.V.Name() }

// Check implements step.Step.
func (s *Restart) Check(ctx context.Context) (step.Plan, error) {
	switch {
	case s.V.Installed == "":
		return step.Plan{Skip: "k3s was not installed before this run; it starts with the new config"}, nil
	case s.V.InstalledThisRun:
		return step.Plan{Skip: "the installer restarted k3s with the new config"}, nil
	}
	return step.Plan{Changes: []step.Change{{Target: "k3s.service", Action: step.Run, Summary: "restart k3s to load " + ConfigPath,
		Payload: remote.Command("systemctl", "restart", "k3s").AsRoot()}}}, nil
}

// Apply implements step.Step.
func (s *Restart) Apply(ctx context.Context, p step.Plan) error {
	if _, err := s.V.Host.Run(ctx, p.Changes[0].Payload.(remote.Cmd)); err != nil {
		return fmt.Errorf("restart k3s: %w", err)
	}
	return nil
}

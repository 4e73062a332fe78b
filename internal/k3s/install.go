package k3s

import (
	"context"
	"fmt"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/effect"

	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Install puts the pinned k3s on the VM with its install script; a changed
// pin is an upgrade (the script replaces the binary and restarts k3s).
type Install struct{ V *VM }

var _ step.Finisher = (*Install)(nil)

// ID implements step.Step.
func (s *Install) ID() string { return "install" }

// Host implements step.Step.
func (s *Install) Host() string { return s.V.Name() }

// Check implements step.Step.
func (s *Install) Check(ctx context.Context) (step.Plan, error) {
	k := s.V.Spec
	want := k.Version.String()
	run := []effect.Effect{s.V.run(remote.Script("install k3s "+want+" with "+k.InstallScriptURL, installScript, k.InstallScriptURL, want).AsRoot())}
	// k3s does not downgrade (its maintainers refuse to: k3s-io/k3s#7537):
	// a newer release installed than pinned is an error, not a plan.
	if got, err := config.ParseK3sRelease(s.V.Installed); err == nil && got.Compare(k.Version) > 0 {
		return step.Plan{}, fmt.Errorf("k3s %s is installed, newer than the pinned %s; k3s cannot be downgraded: set spec.k3s.version to %s or newer", got, want, got)
	}
	switch s.V.Installed {
	case want:
		if !s.V.Active {
			// An install cut short (or a stopped service): the installer
			// finishes the job and starts k3s.
			return step.Plan{Changes: []step.Change{{Target: "k3s", Action: step.Update, Summary: "re-run the k3s " + want + " installer: the k3s service is not running", Effects: run}}}, nil
		}
		return step.Plan{Note: "k3s " + want + " installed"}, nil
	case "":
		return step.Plan{Changes: []step.Change{{Target: "k3s", Action: step.Create, Summary: "install k3s " + want, Effects: run}}}, nil
	}
	return s.V.gate(ctx, step.Plan{Changes: []step.Change{{Target: "k3s", Action: step.Update,
		Summary: fmt.Sprintf("upgrade k3s from %s to %s", s.V.Installed, want), Effects: run}}})
}

// installScript fetches the install script ($1) and runs it with the
// pinned version ($2). The script is kept in a private temporary directory,
// not piped, so a truncated download cannot run half a script.
//
// Upstream's installer runs curl with no bound on a stalled transfer
// (install.sh's download(): curl -o $1 -sfL $2), so a mirror that drops
// mid-download would hold the run while the SSH link stays healthy. curl
// reads $CURL_HOME/.curlrc (curl(1), "--config"): one there gives every
// curl the installer runs the bound mgmtctl's own downloads have.
const installScript = `set -eu
tmp=$(mktemp -d)
trap 'rm -rf -- "$tmp"' EXIT
# A signal ends the script through exit, so the EXIT trap still runs.
trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 130' INT
printf '%s\n' 'connect-timeout = 30' 'speed-limit = 1' 'speed-time = 60' > "$tmp/.curlrc"
curl -sSfL --retry 3 --connect-timeout 30 --speed-limit 1 --speed-time 60 -o "$tmp/install.sh" -- "$1"
CURL_HOME=$tmp INSTALL_K3S_VERSION=$2 sh "$tmp/install.sh"
# The installer skips the start when nothing changed; a service left
# stopped by an interrupted install must run all the same.
systemctl start k3s`

// Finish implements step.Finisher: the installer's work is read back
// (k3s --version), not taken on its word.
func (s *Install) Finish(ctx context.Context, out []remote.Result, err error) error {
	want := s.V.Spec.Version.String()
	if err != nil {
		return fmt.Errorf("install k3s %s: %w", want, err)
	}
	if err := s.V.Gather(ctx); err != nil {
		return err
	}
	if s.V.Installed != want {
		return fmt.Errorf("install k3s %s: k3s --version says %q afterwards", want, s.V.Installed)
	}
	return nil
}

package k3s

import (
	"context"
	"fmt"
	"strings"

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
	if err := CheckUpgrade(s.V.Name(), s.V.Installed, k.Version); err != nil {
		return step.Plan{}, err
	}
	switch s.V.Installed {
	case want:
		if !s.V.Active {
			// Read only here, off a converged run's path.
			res, err := s.V.Host.Look(ctx, remote.ServiceFileState("k3s"))
			if err != nil {
				return step.Plan{}, fmt.Errorf("read whether k3s is masked on %s: %w", s.V.Name(), err)
			}
			if strings.TrimSpace(string(res.Stdout)) == MaskedRuntime {
				// Starting it would bring back a member of the
				// cluster the restore replaced.
				return step.Plan{}, fmt.Errorf("k3s on %s is held stopped (masked) by a restore that did not finish: run mgmtctl restore again to finish it", s.V.Name())
			}
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
# The version the binary says, for the next runs' reads (remote.K3sVersion).
` + remote.K3sVersionRecord + `
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

// CheckUpgrade refuses what k3s cannot do from the installed release to
// the pinned one: a downgrade (k3s's maintainers refuse to support one:
// k3s-io/k3s#7537), and an upgrade that skips a minor version (k3s, as
// Kubernetes, upgrades one minor at a time: docs.k3s.io "Upgrades", and
// Kubernetes' version skew policy, which supports kube-apiserver one minor
// apart). Nothing installed, or a version it cannot read, is no refusal.
func CheckUpgrade(server, installed string, pinned config.K3sRelease) error {
	got, err := config.ParseK3sRelease(installed)
	if err != nil {
		return nil
	}
	switch {
	case got.Compare(pinned) > 0:
		return fmt.Errorf("k3s %s is installed on %s, newer than the pinned %s; k3s cannot be downgraded: set spec.k3s.version to %s or newer", got, server, pinned, got)
	case got.Major == pinned.Major && pinned.Minor > got.Minor+1:
		return fmt.Errorf("k3s %s is installed on %s; the pinned %s skips v%d.%d: k3s, as Kubernetes, upgrades one minor version at a time: pin the newest v%d.%d release, apply, then %s",
			got, server, pinned, got.Major, got.Minor+1, got.Major, got.Minor+1, pinned)
	}
	return nil
}

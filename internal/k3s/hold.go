package k3s

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// A restored snapshot is an older state of the Clusters Cluster API
// manages: a provider's controller that ran before mgmtctl paused them
// would act on Machines that no longer match Proxmox (package capi,
// pause.go). So the server a restore resets starts held: a config.yaml
// drop-in (k3s reads config.yaml.d/*.yaml after config.yaml, in name
// order, pkg/configfilearg/parser.go readConfigFile) starts k3s without
// its agent (disable-agent, a hidden flag of pkg/cli/cmds/server.go: with
// it pkg/cli/server/server.go runs agent.RunStandalone, no kubelet and no
// container runtime), so no pod runs on it, the providers' managers
// among them. Without a pod, no admission webhook can answer either, and
// Cluster API's refuse every write to a Cluster (failurePolicy Fail):
// held, the API server calls none (kube-apiserver
// --disable-admission-plugins, through kube-apiserver-arg+, which k3s
// appends to its own arguments). mgmtctl pauses every Cluster, then
// Release removes the drop-in and restarts k3s with its agent: the
// managers start with every Cluster already paused. The other servers of
// a cluster are stopped meanwhile (Stop), so no pod runs anywhere.

// HoldPath is the drop-in that holds a restored server.
const HoldPath = "/etc/rancher/k3s/config.yaml.d/90-mgmtctl-restore-hold.yaml"

// holdPrefix starts the drop-in's line that names the restore.
const holdPrefix = "# mgmtctl restore of "

// RenderHold is the drop-in for the restore of backup.
func RenderHold(backup string) []byte {
	return []byte(holdPrefix + backup + `
# Written by mgmtctl: k3s runs without its agent (no pod runs here) and
# its API server calls no admission webhook until mgmtctl has paused every
# Cluster of the restored state; the restore removes this file. Run the
# restore again if it is still here.
disable-agent: true
kube-apiserver-arg+:
  - disable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook
`)
}

// HeldBy is the restore a drop-in holds a server for ("" for none).
func HeldBy(hold []byte) string {
	first, _, _ := bytes.Cut(hold, []byte("\n"))
	return strings.TrimSpace(strings.TrimPrefix(string(first), holdPrefix))
}

// HeldError is a server a restore cut short still holds: apply would
// start its pods on a state whose Clusters may not be paused yet.
type HeldError struct{ Server, Backup string }

func (e *HeldError) Error() string {
	return fmt.Sprintf("k3s on %s is held by a restore of %s that did not finish (%s): run that restore again (mgmtctl restore --from %s)",
		e.Server, e.Backup, HoldPath, e.Backup)
}

// Release lifts a restore's hold on a server once its Clusters are
// paused: the drop-in removed, k3s restarted with its agent (systemd's
// restart returns once k3s says it is up, Type=notify). The nodes' and
// pods' readiness is the k3s and addons phases' to wait for.
type Release struct{ V *VM }

var _ step.Step = (*Release)(nil)

// ID implements step.Step.
func (s *Release) ID() string { return "release-hold" }

// Host implements step.Step.
func (s *Release) Host() string { return s.V.Name() }

const releaseScript = `set -eu
rm -f -- "$1"
systemctl restart k3s`

// Check implements step.Step.
func (s *Release) Check(ctx context.Context) (step.Plan, error) {
	cur, err := s.V.Host.ReadFile(ctx, HoldPath, true)
	if errors.Is(err, fs.ErrNotExist) {
		return step.Plan{Note: "no restore holds k3s"}, nil
	}
	if err != nil {
		return step.Plan{}, fmt.Errorf("read %s: %w", HoldPath, err)
	}
	return step.Plan{Changes: []step.Change{{Target: HoldPath, Action: step.Delete,
		Summary: fmt.Sprintf("remove %s (the hold of the restore of %s) and restart k3s with its agent: the pods start, every Cluster paused", HoldPath, HeldBy(cur)),
		Effects: []effect.Effect{s.V.run(remote.Script("remove "+HoldPath+" and restart k3s", releaseScript, HoldPath).AsRoot())}}}}, nil
}

package k3s

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// A restore onto a cluster of servers follows k3s's procedure
// (docs.k3s.io cli/etcd-snapshot, "Restoring a snapshot", multiple
// servers; docs/upstream.md §2.9): k3s stops on every server; the first
// restores the snapshot with --cluster-reset and starts as the only
// member; every other server's etcd data is moved aside ("Backup and
// delete ${datadir}/server/db on each peer etcd server and rejoin the
// nodes", k3s's own message after the reset) and k3s started there, so it
// joins the restored cluster. The steps here are the peers' part; the
// reset itself is package backup's.

// DBDir is a server's datastore directory: etcd's data, its snapshots.
const DBDir = "/var/lib/rancher/k3s/server/db"

// Stop holds k3s stopped on a server for a restore: stopped, and masked
// until the next boot (systemctl mask --runtime), so that nothing starts
// it while the first server resets the cluster. A stopped unit alone is
// not enough: the restored cluster has the IDs of any earlier restore's
// (docs/upstream.md §2.8), so a member that joined the cluster of a
// restore cut short, still starting, is taken for a peer of the new one,
// whose etcd then panics on a member it does not know. A masked unit
// refuses every start ("Unit k3s.service is masked."), a user's or a
// script's, and mask --now stops one under way. A rejoin still running
// from a run that was cut short holds RestoreLock to its end: Stop reads
// and acts once it is done, never halfway through it. The rejoin unmasks
// k3s; a boot does too, and a restore run again masks it first.
type Stop struct{ V *VM }

var _ step.Step = (*Stop)(nil)

// ID implements step.Step.
func (s *Stop) ID() string { return "stop-k3s" }

// Host implements step.Step.
func (s *Stop) Host() string { return s.V.Name() }

// RestoreLock is the flock a restore's scripts on a server's k3s hold
// while they run (under /run: a boot clears it).
const RestoreLock = "/run/mgmtctl-restore.lock"

// MaskedRuntime is systemctl is-enabled's word for a unit masked until
// the next boot.
const MaskedRuntime = "masked-runtime"

// stopScript masks k3s and stops it, under RestoreLock ($1), then its
// pods: their containers outlive the service (docs.k3s.io
// upgrades/killall), and a provider's manager running here would act on
// the restored state as soon as the first server serves it.
// k3s-killall.sh (k3s's install script writes it) stops k3s again, which
// a masked unit allows.
const stopScript = `exec 9>>"$1"
flock -w 120 9 || exit 75
systemctl mask --runtime --now k3s
exec k3s-killall.sh`

// Check implements step.Step: systemd's inactive and failed are stopped;
// any other state (active, activating, a restart loop) is not. Either way
// a unit not masked yet is masked.
func (s *Stop) Check(ctx context.Context) (step.Plan, error) {
	res, err := s.V.Host.Look(ctx, remote.ServiceStateUnder(RestoreLock, "k3s").AsRoot())
	if err != nil {
		return step.Plan{}, fmt.Errorf("read whether k3s runs on %s: %w", s.V.Name(), err)
	}
	if res.ExitCode == 75 {
		return step.Plan{}, fmt.Errorf("k3s on %s: a restore's script still holds %s after two minutes (a rejoin of a run cut short, still starting k3s): run the restore again once it is done", s.V.Name(), RestoreLock)
	}
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	state, file := lines[0], lines[len(lines)-1]
	stopped := state == "inactive" || state == "failed"
	if stopped && file == MaskedRuntime {
		return step.Plan{Note: "k3s is stopped (" + state + ") and masked until it rejoins"}, nil
	}
	summary := "mask k3s until it rejoins (k3s is " + state + ")"
	if !stopped {
		summary = "stop k3s (" + state + ") and mask it until it rejoins"
	}
	return step.Plan{Changes: []step.Change{{Target: "k3s.service", Action: step.Run, Summary: summary,
		Effects: []effect.Effect{s.V.run(remote.Script("systemctl mask --runtime --now k3s; k3s-killall.sh", stopScript, RestoreLock).AsRoot())}}}}, nil
}

// Rejoin moves a server's etcd data aside and starts k3s there, so that
// it joins the restored cluster as a new member, with the backup's token:
// the restored cluster's bootstrap data opens only with it.
type Rejoin struct {
	V     *VM
	Token []byte
}

var _ step.Step = (*Rejoin)(nil)

// ID implements step.Step.
func (s *Rejoin) ID() string { return "rejoin" }

// Host implements step.Step.
func (s *Rejoin) Host() string { return s.V.Name() }

// rejoinScript holds RestoreLock ($2) to its end (systemctl's start
// inherits it), moves the datastore ($1) aside under a name with the time
// (the old data stays on the server until someone removes it), lifts the
// mask Stop put on k3s and starts it:
// with no etcd data and server: in its config, k3s joins the cluster it
// names. systemd's start returns once k3s says it is up (Type=notify),
// that is with its member joined and its API server serving.
const rejoinScript = `set -eu
exec 9>>"$2"
flock 9
systemctl stop k3s
if [ -d "$1" ]; then mv -- "$1" "$1-before-restore-$(date -u +%Y%m%dT%H%M%SZ)"; fi
systemctl unmask --runtime k3s
systemctl start k3s`

// Check implements step.Step. A server whose config.yaml does not name a
// cluster to join would start a cluster of its own from empty data:
// refused, before anything is touched.
func (s *Rejoin) Check(ctx context.Context) (step.Plan, error) {
	cur, err := s.V.Host.ReadFile(ctx, ConfigPath, true)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return step.Plan{}, fmt.Errorf("read %s: %w", ConfigPath, err)
	}
	if !JoinsCluster(cur) {
		return step.Plan{}, fmt.Errorf("%s on %s names no cluster to join (server:): it would start a cluster of its own; run mgmtctl apply, then the restore again", ConfigPath, s.V.Name())
	}
	token := append(bytes.TrimSpace(s.Token), '\n')
	return step.Plan{Changes: []step.Change{{Target: DBDir, Action: step.Run,
		Summary: fmt.Sprintf("put the backup's cluster token in %s, move %s aside and start k3s: %s joins the restored cluster", TokenPath, DBDir, s.V.Name()),
		Effects: []effect.Effect{
			s.V.write(remote.File{Path: TokenPath, Content: token, Mode: 0o600, Owner: "root:root", Sudo: true}),
			s.V.run(remote.Script("move "+DBDir+" aside and start k3s", rejoinScript, DBDir, RestoreLock).AsRoot()),
		}}}}, nil
}

// Members checks that every server's etcd member is healthy, each as its
// own API server sees it (the quorum gate's check): the restore is done
// only when the cluster has all its members again.
type Members struct {
	Name   string // the host the check is shown on
	Health func(ctx context.Context) ([]MemberHealth, error)
}

var _ step.Step = (*Members)(nil)

// ID implements step.Step.
func (s *Members) ID() string { return "etcd-members" }

// Host implements step.Step.
func (s *Members) Host() string { return s.Name }

// Check implements step.Step.
func (s *Members) Check(ctx context.Context) (step.Plan, error) {
	hs, err := s.Health(ctx)
	if err != nil {
		return step.Plan{}, err
	}
	var ok, bad []string
	for _, h := range hs {
		if h.OK {
			ok = append(ok, h.Name)
		} else {
			bad = append(bad, fmt.Sprintf("%s (%s)", h.Name, h.Detail))
		}
	}
	if len(bad) > 0 {
		return step.Plan{}, fmt.Errorf("etcd member %s unhealthy after the restore; k3s's log on it says why (sudo journalctl -u k3s); running the restore again redoes it", strings.Join(bad, ", "))
	}
	return step.Plan{Note: fmt.Sprintf("%d etcd members healthy: %s", len(ok), strings.Join(ok, ", "))}, nil
}

// EtcdRoleLabel marks a k3s server's Node: it runs an etcd member.
const EtcdRoleLabel = "node-role.kubernetes.io/etcd"

// StaleNodes removes the Node objects a restored snapshot brought back for
// servers the config no longer has: their kubelet will never post again,
// and a NotReady server would stay in every listing. Only servers' Nodes
// (k3s's etcd role) are considered: an agent a user joined is not ours.
type StaleNodes struct {
	Name    string // the host the step is shown on
	Servers []string
	API     func(ctx context.Context) (*kube.Reader, error)
}

var _ step.Step = (*StaleNodes)(nil)

// ID implements step.Step.
func (s *StaleNodes) ID() string { return "stale-nodes" }

// Host implements step.Step.
func (s *StaleNodes) Host() string { return s.Name }

var nodesResource = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// Check implements step.Step.
func (s *StaleNodes) Check(ctx context.Context) (step.Plan, error) {
	cl, err := s.API(ctx)
	if err != nil || cl == nil {
		return step.Plan{Skip: "the cluster is not reachable yet"}, err
	}
	nodes, err := cl.Nodes().List(ctx, metav1.ListOptions{LabelSelector: EtcdRoleLabel})
	if err != nil {
		return step.Plan{}, fmt.Errorf("list the servers' Nodes: %w", err)
	}
	var p step.Plan
	for _, n := range nodes.Items {
		if slices.Contains(s.Servers, n.Name) {
			continue
		}
		p.Changes = append(p.Changes, step.Change{Target: "node/" + n.Name, Action: step.Delete,
			Summary: "delete Node " + n.Name + ": a server the config does not have",
			Effects: []effect.Effect{effect.Delete{Resource: nodesResource, Object: types.NamespacedName{Name: n.Name}}}})
	}
	if len(p.Changes) == 0 {
		p.Note = "every server's Node is a server of the config"
	}
	return p, nil
}

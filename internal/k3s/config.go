package k3s

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// RenderConfig is /etc/rancher/k3s/config.yaml: embedded etcd, so the
// cluster can be backed up with `k3s etcd-snapshot` and grow to more
// servers (a lone server's default datastore, SQLite, has neither; k3s
// converts it to etcd on the restart this brings): cluster-init on the
// server the cluster was initialised on, the cluster's URL and the token
// file on the servers that join it; traefik disabled (the management
// cluster serves no ingress); the VM's IP and the VIP in the serving
// certificate so a kubeconfig pointing at either verifies; and an admin
// kubeconfig readable by root only. The token itself is never in this
// file, so its diff shows no secret.
func RenderConfig(s Spec) []byte {
	var b bytes.Buffer
	b.WriteString("# Managed by mgmtctl: changes are overwritten on the next apply.\n")
	if s.Join == "" {
		b.WriteString("cluster-init: true\n")
	} else {
		fmt.Fprintf(&b, "server: %q\ntoken-file: %s\n", s.Join, TokenPath)
	}
	b.WriteString("disable:\n  - traefik\n")
	fmt.Fprintf(&b, "tls-san:\n  - %q\n", s.IP)
	if s.VIP.IsValid() {
		fmt.Fprintf(&b, "  - %q\n", s.VIP)
	}
	b.WriteString("write-kubeconfig-mode: \"0600\"\n")
	if s.SnapshotSchedule != "" {
		fmt.Fprintf(&b, "etcd-snapshot-schedule-cron: %q\n", s.SnapshotSchedule)
	}
	if s.SnapshotRetention > 0 {
		fmt.Fprintf(&b, "etcd-snapshot-retention: %d\n", s.SnapshotRetention)
	}
	return b.Bytes()
}

// Config writes config.yaml when it differs; RestartK3s, a step of its
// own, sees the file newer than the running k3s and restarts it.
type Config struct{ V *VM }

var _ step.Step = (*Config)(nil)

// ID implements step.Step.
func (s *Config) ID() string { return "config" }

// Host implements step.Step.
func (s *Config) Host() string { return s.V.Name() }

// Check implements step.Step.
func (s *Config) Check(ctx context.Context) (step.Plan, error) {
	return s.V.filePlan(ctx, ConfigPath, s.V.config())
}

// Restart restarts k3s when it runs with an older config.yaml than the one
// on disk: k3s reads its config only when it starts. It decides from what
// it observes, not from what this run did, so a run cut short between
// writing the config and restarting k3s is completed by the next one:
// k3s became active (systemd's ActiveEnterTimestamp) before config.yaml
// last changed, or config.yaml is not yet what it will be written as
// (check mode). The installer (re)starts k3s itself, so an install or
// upgrade still to come skips it. Like node-ready, it then waits for the
// node: it is a step.Waiter through the NodeReady it embeds, whose VM it
// acts on.
type Restart struct{ *NodeReady }

var _ step.Waiter = (*Restart)(nil)

// ID implements step.Step.
func (s *Restart) ID() string { return RestartID }

// Host implements step.Step.
func (s *Restart) Host() string { return s.V.Name() }

// systemdTime is ActiveEnterTimestamp with --timestamp=us+utc.
const systemdTime = "Mon 2006-01-02 15:04:05.000000 MST"

// Check implements step.Step.
func (s *Restart) Check(ctx context.Context) (step.Plan, error) {
	if s.V.Host == nil || s.V.Installed == "" {
		return step.Plan{Skip: "k3s is not installed yet; it starts with this config"}, nil
	}
	if s.V.Installed != s.V.Spec.Version.String() {
		return step.Plan{Skip: "the k3s installer (re)starts k3s with this config"}, nil
	}
	res, err := remote.Batch(ctx, s.V.Host, true,
		remote.FileContent(ConfigPath).AsRoot(),
		remote.FileModTime(ConfigPath).AsRoot(),
		remote.ServiceStartedAt("k3s").AsRoot())
	if err != nil {
		return step.Plan{}, fmt.Errorf("read when k3s started and config.yaml changed: %w", err)
	}
	restart := step.Plan{Changes: []step.Change{{Target: "k3s.service", Action: step.Run,
		Effects: []effect.Effect{s.V.run(remote.Command("systemctl", "restart", "k3s").AsRoot())}}}}
	if res[0].ExitCode != 0 || !bytes.Equal(res[0].Stdout, s.V.config()) {
		restart.Changes[0].Summary = "restart k3s to load the new " + ConfigPath
		return s.V.gate(ctx, restart)
	}
	started, err := time.Parse(systemdTime, strings.TrimSpace(string(res[2].Stdout)))
	if err != nil {
		return step.Plan{Skip: "k3s is not running; the install step starts it"}, nil
	}
	secs, err := strconv.ParseFloat(strings.TrimSpace(string(res[1].Stdout)), 64)
	if err != nil {
		return step.Plan{}, fmt.Errorf("read the time %s changed: %q", ConfigPath, res[1].Stdout)
	}
	changed := time.Unix(0, int64(secs*1e9))
	if started.After(changed) {
		return step.Plan{Note: "k3s runs with " + ConfigPath + " as it is"}, nil
	}
	restart.Changes[0].Summary = fmt.Sprintf("restart k3s to load %s (changed %s, k3s running since %s)", ConfigPath,
		changed.UTC().Format(time.RFC3339), started.UTC().Format(time.RFC3339))
	return s.V.gate(ctx, restart)
}

// Finish implements step.Finisher.
func (s *Restart) Finish(ctx context.Context, out []remote.Result, err error) error {
	if err != nil {
		return fmt.Errorf("restart k3s: %w", err)
	}
	return nil
}

package k3s

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/s3layout"
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
	if s.SecretsEncryption {
		b.WriteString("secrets-encryption: true\n")
	}
	if s.SnapshotSchedule != "" {
		fmt.Fprintf(&b, "etcd-snapshot-schedule-cron: %q\n", s.SnapshotSchedule)
	}
	if s.SnapshotRetention > 0 {
		fmt.Fprintf(&b, "etcd-snapshot-retention: %d\n", s.SnapshotRetention)
	}
	if s3 := s.S3; s3 != nil && s3.Cluster != "" {
		// Every scheduled snapshot also goes to the bucket, into this
		// server's folder under its cluster's (package s3layout), where
		// etcd-s3-retention counts this server's alone; the keys are in
		// EnvPath. The CA is given inline, base64-encoded PEM, which
		// etcd-s3-endpoint-ca takes as well as a path (k3s
		// pkg/etcd/s3/s3.go, loadEndpointCAs).
		fmt.Fprintf(&b, "etcd-s3: true\netcd-s3-endpoint: %q\netcd-s3-bucket: %q\n", s3.Endpoint, s3.Bucket)
		fmt.Fprintf(&b, "etcd-s3-folder: %q\n", s3layout.Folder(s3.Folder, s3.Cluster, s.Name))
		// The retention is per server in the bucket too: each server
		// has a folder of its own.
		if s.SnapshotRetention > 0 {
			fmt.Fprintf(&b, "etcd-s3-retention: %d\n", s.SnapshotRetention)
		}
		if s3.Region != "" {
			fmt.Fprintf(&b, "etcd-s3-region: %q\n", s3.Region)
		}
		if len(s3.CA) > 0 {
			fmt.Fprintf(&b, "etcd-s3-endpoint-ca: %q\n", base64.StdEncoding.EncodeToString(s3.CA))
		}
	}
	return b.Bytes()
}

// EnvPath is the k3s unit's first EnvironmentFile (the installer's unit:
// EnvironmentFile=-/etc/default/%N, then /etc/sysconfig/%N, then
// k3s.service.env). The installer rewrites k3s.service.env on every
// install from its own K3S_* variables; it never touches this one.
const EnvPath = remote.K3sEnvFile

// envHeader starts the environment file mgmtctl writes; a file without
// it is someone else's, left alone.
const envHeader = "# Managed by mgmtctl: the S3 keys of spec.backup.s3 (secrets.yaml). Mode 0600.\n"

// RenderEnv is EnvPath's content: the S3 keys as AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, the variables k3s's etcd-s3-access-key and
// etcd-s3-secret-key flags read (k3s pkg/cli/cmds/server.go), so they are
// in no config file and on no command line. nil without S3. The keys are
// validated to need no quoting, so systemd and sh read the file alike.
func RenderEnv(s Spec) []byte {
	if s.S3 == nil {
		return nil
	}
	return []byte(envHeader + "AWS_ACCESS_KEY_ID=" + s.S3.AccessKey + "\nAWS_SECRET_ACCESS_KEY=" + s.S3.SecretKey + "\n")
}

// envPending says the environment file, as cur holds it (nil: absent), is
// not what the Env step leaves there: the keys still to write, or, with
// no S3, mgmtctl's file still to remove (a file of someone else's is left
// alone). Env decides by it, and Restart, which restarts k3s to load it.
func (v *VM) envPending(cur []byte) bool {
	want := v.env()
	if want == nil {
		return bytes.HasPrefix(cur, []byte(envHeader))
	}
	return !bytes.Equal(cur, want)
}

// Env writes EnvPath when it differs from what it should hold, and
// removes one mgmtctl wrote once S3 is gone from the config. The file is
// a secret: its plan shows no content, and RestartK3s restarts k3s after
// it changes, as after config.yaml.
type Env struct{ V *VM }

var _ step.Step = (*Env)(nil)

// ID implements step.Step.
func (s *Env) ID() string { return "s3-keys" }

// Independent implements step.Independent: its Check reads the environment file on the VM,
// nothing an earlier step left.
func (s *Env) Independent() {}

// Host implements step.Step.
func (s *Env) Host() string { return s.V.Name() }

// Check implements step.Step.
func (s *Env) Check(ctx context.Context) (step.Plan, error) {
	want := s.V.env()
	cur, action, err := s.V.current(ctx, EnvPath)
	if err != nil {
		return step.Plan{}, err
	}
	switch {
	case !s.V.envPending(cur) && want == nil:
		return step.Plan{Note: "no S3 keys for k3s (spec.backup.s3 is not set)"}, nil
	case !s.V.envPending(cur):
		return step.Plan{Note: EnvPath + " holds the S3 keys"}, nil
	case want == nil:
		return step.Plan{Changes: []step.Change{{Target: EnvPath, Action: step.Delete,
			Summary: "remove the S3 keys from " + EnvPath + " (spec.backup.s3 is gone)",
			Effects: []effect.Effect{s.V.run(remote.Command("rm", "-f", "--", EnvPath).AsRoot())}}}}, nil
	}
	return step.Plan{Changes: []step.Change{{Target: EnvPath, Action: action,
		Summary: fmt.Sprintf("%s %s with the S3 keys (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; 0600, content not shown)", action, EnvPath),
		Effects: []effect.Effect{s.V.write(remote.File{Path: EnvPath, Content: want, Mode: 0o600, Owner: "root:root", Sudo: true})}}}}, nil
}

// Config writes config.yaml when it differs; RestartK3s, a step of its
// own, sees the file newer than the running k3s and restarts it.
type Config struct{ V *VM }

var _ step.Step = (*Config)(nil)

// ID implements step.Step.
func (s *Config) ID() string { return "config" }

// Independent implements step.Independent: its Check reads config.yaml on the VM,
// nothing an earlier step left.
func (s *Config) Independent() {}

// Host implements step.Step.
func (s *Config) Host() string { return s.V.Name() }

// Check implements step.Step.
func (s *Config) Check(ctx context.Context) (step.Plan, error) {
	if s.V.Hold != nil {
		return step.Plan{}, &HeldError{Server: s.V.Name(), Backup: HeldBy(s.V.Hold)}
	}
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

// Independent implements step.Independent: its Check reads the files and the service on the VM, and the facts Prepare gathered,
// nothing an earlier step left.
func (s *Restart) Independent() {}

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
		remote.ServiceStartedAt("k3s").AsRoot(),
		remote.FileContent(EnvPath).AsRoot(),
		remote.FileModTime(EnvPath).AsRoot())
	if err != nil {
		return step.Plan{}, fmt.Errorf("read when k3s started and config.yaml changed: %w", err)
	}
	restart := step.Plan{Changes: []step.Change{{Target: "k3s.service", Action: step.Run,
		Effects: []effect.Effect{s.V.run(remote.Command("systemctl", "restart", "k3s").AsRoot())}}}}
	if res[0].ExitCode != 0 || !bytes.Equal(res[0].Stdout, s.V.config()) {
		restart.Changes[0].Summary = "restart k3s to load the new " + ConfigPath
		return s.V.gate(ctx, restart)
	}
	// The environment file: k3s reads it only when it starts, like
	// config.yaml; one still to be written or removed means a restart.
	envNow := res[3].Stdout
	if res[3].ExitCode != 0 {
		envNow = nil
	}
	if s.V.envPending(envNow) {
		restart.Changes[0].Summary = "restart k3s to load the S3 keys in " + EnvPath
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
	if res[4].ExitCode == 0 {
		if envSecs, err := strconv.ParseFloat(strings.TrimSpace(string(res[4].Stdout)), 64); err == nil {
			if t := time.Unix(0, int64(envSecs*1e9)); t.After(changed) {
				changed = t
			}
		}
	}
	if started.After(changed) {
		return step.Plan{Note: "k3s runs with " + ConfigPath + " as it is"}, nil
	}
	files := ConfigPath
	if s.V.env() != nil {
		files += " and " + EnvPath
	}
	restart.Changes[0].Summary = fmt.Sprintf("restart k3s to load %s (changed %s, k3s running since %s)", files,
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

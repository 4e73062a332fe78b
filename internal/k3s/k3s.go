// Package k3s holds the k3s phase's steps: on the VM, over SSH as the VM
// user with sudo, they install the guest agent, write k3s's config, install
// the pinned k3s with its install script, and restart k3s when its config
// changed. Node readiness is watched over the Kubernetes API (package kube).
package k3s

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Paths on the VM (docs.k3s.io "Configuration File" and "Cluster Access";
// docs/upstream.md §2.3, §2.4).
const (
	ConfigPath = "/etc/rancher/k3s/config.yaml"
	// ServerTLSDir exists once k3s has started as a server; and
	// EncryptionConfigPath once it has with secrets-encryption (k3s
	// pkg/daemons/control/deps/deps.go, FillRuntimeCerts).
	ServerTLSDir         = "/var/lib/rancher/k3s/server/tls"
	EncryptionConfigPath = "/var/lib/rancher/k3s/server/cred/encryption-config.json"
	KubeconfigPath       = "/etc/rancher/k3s/k3s.yaml"
	RestartID            = "restart-k3s"
)

// Spec is what the k3s phase needs of mgmt.yaml for one server.
type Spec struct {
	Name             string            // the VM's and the node's name
	IP               netip.Addr        // the VM's address: k3s's tls-san
	Version          config.K3sRelease // the pinned release
	InstallScriptURL string
	// VIP is the cluster's API address when it has one (kube-vip's): in
	// tls-san too, so a kubeconfig pointing at it verifies.
	VIP netip.Addr
	// Join is the URL of the cluster this server joins with the cluster
	// token; empty for the server the cluster was initialised on.
	Join string
	// SnapshotSchedule and SnapshotRetention are k3s's own scheduled
	// snapshots (etcd-snapshot-schedule-cron, etcd-snapshot-retention);
	// empty and 0 leave k3s's defaults.
	SnapshotSchedule  string
	SnapshotRetention int
	// S3, when set, is where k3s sends its snapshots off-site; its keys
	// go to EnvPath, never to config.yaml.
	S3 *S3Spec
	// SecretsEncryption is k3s's secrets-encryption: Secrets encrypted
	// at rest in etcd, and so in every snapshot of it (encrypt.go).
	SecretsEncryption bool
}

// S3Spec is k3s's etcd-s3* settings, and the keys k3s reads from its
// environment.
type S3Spec struct {
	Endpoint, Bucket, Folder, Region string
	// Cluster is the cluster's id for its folder in the bucket
	// (s3layout.Folder), found by the phase's Prepare; "" before it is known
	// (a check run before the first server's VM exists).
	Cluster string
	// CA is the PEM CA for the endpoint; nil: the VM's trust store.
	CA                   []byte
	AccessKey, SecretKey string
}

// VM is the k3s phase's view of the VM, shared by its steps.
type VM struct {
	Spec Spec
	Host remote.Reader
	// Installed is the k3s version found on the VM ("" if none), as
	// gathered before the phase's steps ran.
	Installed string
	// Active says the k3s service runs.
	Active bool
	// Config is config.yaml as gathered (nil if absent).
	Config []byte
	// Initialised says k3s has run as a server here (its certificates
	// directory exists).
	Initialised bool
	// Encryption is the server's secrets-encryption config as gathered
	// (encrypt.go).
	Encryption Encryption
	// Hold is HoldPath as gathered: a restore cut short holds this
	// server (nil when none does).
	Hold []byte
	// Gate, when set (a server among several), is asked before k3s is
	// restarted or upgraded here: an error stops the run before this
	// server is touched.
	Gate func(ctx context.Context) error
}

// current reads a root-owned file on the VM as it is: its bytes and
// whether writing it creates or updates it. Before the VM exists (a check
// run) every file is still to create.
func (v *VM) current(ctx context.Context, path string) ([]byte, step.Action, error) {
	if v.Host == nil {
		return nil, step.Create, nil
	}
	cur, err := v.Host.ReadFile(ctx, path, true)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, step.Create, nil
	}
	return cur, step.Update, err
}

// filePlan is a managed file's plan: nothing when it has want's bytes,
// else writing them (root's, 0600), with the diff --diff shows. The bytes
// --diff shows are the bytes written.
func (v *VM) filePlan(ctx context.Context, path string, want []byte) (step.Plan, error) {
	cur, action, err := v.current(ctx, path)
	if err != nil {
		return step.Plan{}, err
	}
	if bytes.Equal(cur, want) {
		return step.Plan{Note: path + " up to date"}, nil
	}
	return step.Plan{Changes: []step.Change{{Target: path, Action: action, Summary: action.String() + " " + path,
		Diff:    &step.Diff{Path: path, Before: string(cur), After: string(want)},
		Effects: []effect.Effect{v.write(remote.File{Path: path, Content: want, Mode: 0o600, Owner: "root:root", Sudo: true})}}}}, nil
}

// run is the effect of running c on the VM.
func (v *VM) run(c remote.Cmd) effect.Run { return effect.Run{Host: v.Name(), Cmd: c} }

// write is the effect of writing f on the VM.
func (v *VM) write(f remote.File) effect.Write { return effect.Write{Host: v.Name(), File: f} }

// gate runs the Gate, if any, for a plan that takes k3s down here.
func (v *VM) gate(ctx context.Context, p step.Plan) (step.Plan, error) {
	if v.Gate == nil || p.Empty() {
		return p, nil
	}
	if err := v.Gate(ctx); err != nil {
		return step.Plan{}, err
	}
	return p, nil
}

// Name is the VM as the recap shows it.
func (v *VM) Name() string { return v.Spec.Name }

// config is config.yaml as it should be on this VM: what the config step
// writes and the restart step compares.
func (v *VM) config() []byte { return RenderConfig(v.Spec) }

// env is EnvPath as it should be on this VM (nil: absent, or someone
// else's).
func (v *VM) env() []byte { return RenderEnv(v.Spec) }

// Gather reads the installed k3s version and whether the service runs.
func (v *VM) Gather(ctx context.Context) error {
	if v.Host == nil {
		v.Installed = ""
		return nil
	}
	res, err := remote.Batch(ctx, v.Host, true,
		remote.K3sVersion().AsRoot(),
		remote.ServiceActive("k3s").AsRoot(),
		remote.FileContent(ConfigPath).AsRoot(),
		remote.PathExists(ServerTLSDir).AsRoot(),
		remote.EncryptionConfigSummary(EncryptionConfigPath).AsRoot(),
		remote.FileContent(HoldPath).AsRoot())
	if err != nil {
		return fmt.Errorf("read the k3s version: %w", err)
	}
	v.Installed = ""
	if res[0].ExitCode == 0 {
		v.Installed = ParseVersion(string(res[0].Stdout))
	}
	v.Active = strings.TrimSpace(string(res[1].Stdout)) == "active"
	v.Config = nil
	if res[2].ExitCode == 0 {
		v.Config = res[2].Stdout
	}
	v.Initialised, v.Encryption = res[3].ExitCode == 0, parseEncryption(res[4].Stdout)
	v.Hold = nil
	if res[5].ExitCode == 0 {
		v.Hold = res[5].Stdout
	}
	return nil
}

// serviceState is systemd's state of the k3s unit now (active, inactive,
// activating, failed…), read live rather than from Gather's facts.
func (v *VM) serviceState(ctx context.Context) (string, error) {
	res, err := v.Host.Look(ctx, remote.ServiceActive("k3s"))
	if err != nil {
		return "", fmt.Errorf("read whether k3s runs on %s: %w", v.Name(), err)
	}
	return strings.TrimSpace(string(res.Stdout)), nil
}

// ParseVersion reads `k3s --version`: "k3s version v1.35.7+k3s1 (abcdef12)".
func ParseVersion(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "k3s version "); ok {
			return strings.Fields(rest + " ")[0]
		}
	}
	return ""
}

var metav1GetOptions = metav1.GetOptions{}

package k3s

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// What `k3s server` reads before it boots: config.yaml, whose keys are
// the server's long flag names (k3s-io/k3s v1.35.7+k3s1
// pkg/configfilearg/parser.go; pkg/cli/cmds/server.go for the names), and
// the few command-line flags the lab's installer and tests pass.

// Config is what k3s reads from config.yaml (CLI flag names without --).
type Config struct {
	TLSSAN              []string `json:"tls-san"`
	Disable             []string `json:"disable"`
	WriteKubeconfigMode string   `json:"write-kubeconfig-mode"`
	NodeIP              string   `json:"node-ip"`
	ClusterInit         bool     `json:"cluster-init"`
	Server              string   `json:"server"`
	Token               string   `json:"token"`
	TokenFile           string   `json:"token-file"`
	// The scheduled snapshots (snapshots.go).
	SnapshotCron      string `json:"etcd-snapshot-schedule-cron"`
	SnapshotRetention int    `json:"etcd-snapshot-retention"`
	DisableSnapshots  bool   `json:"etcd-disable-snapshots"`
	// SecretsEncryption is k3s's secrets-encryption (encryption.go).
	SecretsEncryption bool `json:"secrets-encryption"`
	// DisableAgent is k3s's hidden disable-agent: the server runs no
	// kubelet, so no pod runs on it (k3s pkg/cli/server/server.go: with
	// DisableAgent, agent.RunStandalone with the container runtime
	// endpoint /dev/null instead of agent.Run).
	DisableAgent bool `json:"disable-agent"`
	// APIServerArgs are kube-apiserver-arg's "flag=value" entries, each
	// over the flag k3s sets itself or added (apiServerArgs).
	APIServerArgs []string `json:"kube-apiserver-arg"`
	// S3 is where snapshots go off-site (s3.go).
	S3 S3Config `json:"-"`
	// Unknown are the keys k3s has no flag for, in file order.
	Unknown []string `json:"-"`
}

// warnUnknown logs, as k3s's configfilearg parser does for a config.yaml
// key that is no flag, one warning per key, and skips it: k3s
// pkg/configfilearg/parser.go, FilterArgs: logrus.Warnf("Unknown flag %s
// found in config.yaml, skipping\n", ...) with the flag as "--key"
// (k3s-io/k3s #4509, #6756), in logrus's text format.
func warnUnknown(log io.Writer, keys []string, now time.Time) {
	for _, k := range keys {
		fmt.Fprintf(log, "time=%q level=warning msg=%q\n", now.UTC().Format(time.RFC3339), "Unknown flag --"+k+" found in config.yaml, skipping")
	}
}

// serverFlagNames are the flags of `k3s server` (docs.k3s.io
// cli/server); config.yaml keys are flag names, optionally suffixed with
// "+" to append to a list.
var serverFlagNames = strings.Fields(`config debug v vmodule log alsologtostderr bind-address https-listen-port
advertise-address advertise-port tls-san tls-san-security data-dir cluster-cidr service-cidr
service-node-port-range cluster-dns cluster-domain flannel-backend flannel-ipv6-masq
flannel-external-ip egress-selector-mode servicelb-namespace write-kubeconfig o
write-kubeconfig-mode write-kubeconfig-group token t token-file agent-token agent-token-file
server s cluster-init cluster-reset cluster-reset-restore-path kube-apiserver-arg etcd-arg
kube-controller-manager-arg kube-scheduler-arg kube-cloud-controller-manager-arg
datastore-endpoint datastore-cafile datastore-certfile datastore-keyfile etcd-expose-metrics
etcd-disable-snapshots etcd-snapshot-name etcd-snapshot-schedule-cron etcd-snapshot-retention
etcd-snapshot-dir etcd-snapshot-compress etcd-s3 etcd-s3-endpoint etcd-s3-endpoint-ca
etcd-s3-skip-ssl-verify etcd-s3-access-key etcd-s3-secret-key etcd-s3-bucket etcd-s3-region
etcd-s3-folder etcd-s3-retention etcd-s3-proxy etcd-s3-config-secret etcd-s3-insecure etcd-s3-timeout
default-local-storage-path disable disable-scheduler disable-cloud-controller
disable-kube-proxy disable-network-policy disable-helm-controller embedded-registry
supervisor-metrics node-name with-node-id node-label node-taint image-credential-provider-bin-dir
image-credential-provider-config docker container-runtime-endpoint default-runtime
image-service-endpoint disable-default-registry-endpoint nonroot-devices pause-image snapshotter
private-registry system-default-registry node-ip node-external-ip node-internal-dns
node-external-dns resolv-conf flannel-iface flannel-conf flannel-cni-conf-dir flannel-cni-conf
vpn-auth vpn-auth-file kubelet-arg kube-proxy-arg protect-kernel-defaults secrets-encryption
secrets-encryption-provider enable-pprof rootless prefer-bundled-bin selinux lb-server-port
disable-apiserver disable-controller-manager disable-etcd kube-apiserver-arg airgap-extra-registry
disable-agent`) // the last: hidden flags

func knownServerFlag(key string) bool {
	key = strings.TrimSuffix(key, "+")
	for _, f := range serverFlagNames {
		if f == key {
			return true
		}
	}
	return false
}

// LoadConfig reads config.yaml, then each file of config.yaml.d whose
// name ends in .yaml or .yml, in name order, as k3s does (k3s
// pkg/configfilearg/parser.go, readConfigFile and dotDFiles): a key in a
// later file replaces the earlier value, and a key suffixed "+" appends
// to it. Repeatable flags accept a list or a single string.
func LoadConfig(path string) (Config, error) {
	var c Config
	files := []string{path}
	if ents, err := os.ReadDir(path + ".d"); err == nil {
		for _, e := range ents {
			n := strings.ToLower(e.Name())
			if !e.IsDir() && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				files = append(files, filepath.Join(path+".d", e.Name()))
			}
		}
	} else if !os.IsNotExist(err) {
		return c, err
	}
	raw := map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if os.IsNotExist(err) && f == path {
			continue
		}
		if err != nil {
			return c, err
		}
		var one map[string]any
		if err := yaml.Unmarshal(b, &one); err != nil {
			return c, fmt.Errorf("parse %s: %w", f, err)
		}
		for k, v := range one {
			key, add := strings.CutSuffix(k, "+")
			if old, ok := raw[key]; ok && add {
				v = append(toSlice(old), toSlice(v)...)
			}
			raw[key] = v
		}
	}
	if len(raw) == 0 {
		return c, nil
	}
	b, err := yaml.Marshal(raw)
	if err != nil {
		return c, err
	}
	list := func(v any) []string {
		switch t := v.(type) {
		case string:
			return strings.Split(t, ",")
		case []any:
			var out []string
			for _, e := range t {
				out = append(out, fmt.Sprint(e))
			}
			return out
		}
		return nil
	}
	c.TLSSAN = list(raw["tls-san"])
	c.Disable = list(raw["disable"])
	if v, ok := raw["write-kubeconfig-mode"]; ok {
		c.WriteKubeconfigMode = fmt.Sprint(v)
	}
	if v, ok := raw["node-ip"]; ok {
		c.NodeIP = fmt.Sprint(v)
	}
	if v, ok := raw["server"]; ok {
		c.Server = fmt.Sprint(v)
	}
	if v, ok := raw["cluster-init"]; ok {
		c.ClusterInit = fmt.Sprint(v) == "true"
	}
	if v, ok := raw["token"]; ok {
		c.Token = fmt.Sprint(v)
	}
	if v, ok := raw["token-file"]; ok {
		c.TokenFile = fmt.Sprint(v)
	}
	if v, ok := raw["etcd-snapshot-schedule-cron"]; ok {
		c.SnapshotCron = fmt.Sprint(v)
	}
	if v, ok := raw["etcd-snapshot-retention"]; ok {
		if n, err := strconv.Atoi(fmt.Sprint(v)); err == nil {
			c.SnapshotRetention = n
		} else {
			return c, fmt.Errorf("parse %s: etcd-snapshot-retention: %w", path, err)
		}
	}
	if v, ok := raw["etcd-disable-snapshots"]; ok {
		c.DisableSnapshots = fmt.Sprint(v) == "true"
	}
	if v, ok := raw["secrets-encryption"]; ok {
		c.SecretsEncryption = fmt.Sprint(v) == "true"
	}
	if v, ok := raw["disable-agent"]; ok {
		c.DisableAgent = fmt.Sprint(v) == "true"
	}
	for _, a := range toSlice(raw["kube-apiserver-arg"]) {
		c.APIServerArgs = append(c.APIServerArgs, fmt.Sprint(a))
	}
	if err := yaml.Unmarshal(b, &c.S3); err != nil {
		return c, fmt.Errorf("parse %s: etcd-s3: %w", path, err)
	}
	// etcd-s3-retention is the S3 retention (pkg/cli/cmds/server.go,
	// documented from v1.34.0); unset, it is etcd-snapshot-retention's
	// (pkg/etcd/s3/s3.go GetClient: "retention ... may have been
	// defaulted from the etcd-snapshot-retention flag"), whose default is
	// 5. That defaulting is read from that comment only: UNVERIFIED in the
	// server's flag handling (docs/lab.md).
	c.S3.Retention = c.SnapshotRetention
	if v, ok := raw["etcd-s3-retention"]; ok {
		n, err := strconv.Atoi(fmt.Sprint(v))
		if err != nil {
			return c, fmt.Errorf("parse %s: etcd-s3-retention: %w", path, err)
		}
		c.S3.Retention = n
	}
	if c.S3.Retention <= 0 {
		c.S3.Retention = defaultSnapshotRetention
	}
	for k := range raw {
		if !knownServerFlag(k) {
			c.Unknown = append(c.Unknown, k)
		}
	}
	sort.Strings(c.Unknown)
	return c, nil
}

// toSlice is a value as a list: k3s's toSlice (pkg/configfilearg).
func toSlice(v any) []any {
	switch t := v.(type) {
	case nil:
		return nil
	case []any:
		return t
	case string:
		return []any{t}
	}
	if s := strings.TrimSpace(fmt.Sprint(v)); s != "" {
		return []any{s}
	}
	return nil
}

// serverFlags are the command-line flags of `k3s server` the lab reads;
// it takes the rest of its configuration from config.yaml.
type serverFlags struct {
	clusterInit, clusterReset bool
	restorePath               string
	token, tokenFile          string
	server                    string
	// s3 is --etcd-s3 given on the command line, over config.yaml's;
	// s3Folder --etcd-s3-folder.
	s3       *bool
	s3Folder *string
}

func parseServerFlags(args []string) (serverFlags, error) {
	var f serverFlags
	for i := 0; i < len(args); i++ {
		k, v, has := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		value := func() string {
			if !has && i+1 < len(args) {
				i++
				return args[i]
			}
			return v
		}
		switch k {
		case "cluster-init":
			f.clusterInit = !has || v == "true"
		case "cluster-reset":
			f.clusterReset = !has || v == "true"
		case "cluster-reset-restore-path":
			f.restorePath = value()
		case "token", "t":
			f.token = value()
		case "token-file":
			f.tokenFile = value()
		case "server", "s":
			f.server = value()
		case "etcd-s3":
			b := !has || v == "true"
			f.s3 = &b
		case "etcd-s3-folder", "s3-folder":
			folder := value()
			f.s3Folder = &folder
		}
		// Other flags (--disable, --tls-san, ...) are config.yaml's
		// business in the lab: a flag-with-value not known here keeps its
		// value attached (--flag=value), as the installer writes them.
	}
	if f.restorePath != "" && !f.clusterReset {
		return f, errors.New("invalid flag use; --cluster-reset required with --cluster-reset-restore-path")
	}
	return f, nil
}

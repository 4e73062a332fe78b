package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// SecretEnv is the environment variable that carries the Proxmox token
// secret; it wins over the secrets file.
const SecretEnv = "MGMTCTL_PROXMOX_TOKEN_SECRET"

// MgmtctlSecretEnv carries mgmtctl's own token secret (api access); it
// wins over the secrets file.
const MgmtctlSecretEnv = "MGMTCTL_PROXMOX_MGMTCTL_TOKEN_SECRET"

// The environment variables that carry spec.backup.s3's keys; they win
// over the secrets file.
const (
	S3AccessKeyEnv = "MGMTCTL_S3_ACCESS_KEY"
	S3SecretKeyEnv = "MGMTCTL_S3_SECRET_KEY"
)

// Env is what loading needs from the laptop: the home directory for ~/ and
// the environment. Passing it in keeps tests off the real home.
type Env struct {
	Home   string
	Getenv func(string) string
	// dir is the config file's directory; relative paths resolve there.
	dir string
}

// Expand resolves ~/ against the home directory and relative paths against
// the config file's directory.
func (e Env) Expand(p string) string {
	switch {
	case p == "~":
		return e.Home
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(e.Home, p[2:])
	case filepath.IsAbs(p) || e.dir == "":
		return p
	}
	return filepath.Join(e.dir, p)
}

// Loaded is a validated config with its secrets and where they came from.
type Loaded struct {
	Path        string
	SecretsPath string
	Cluster     ManagementCluster
	Secrets     Secrets
	// SecretSource says where the token secret came from (the environment
	// variable's name or the secrets file), or is empty when none was set.
	SecretSource string
	// AuthorizedKey is the VM user's public key, as read from
	// spec.vm.sshPublicKeyFile.
	AuthorizedKey string
	Env           Env
}

// Load reads, defaults and validates a config file and its secrets. Every
// problem is reported at once as Errors. secretsPath may be empty: then
// secrets.yaml beside the config is used if it exists.
func Load(path, secretsPath string, env Env) (*Loaded, error) {
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	abs, err := filepath.Abs(path)
	if err == nil {
		env.dir = filepath.Dir(abs)
	}
	l := &Loaded{Path: path, Env: env}
	r := &report{file: path, lines: map[string]int{}, set: map[string]bool{}}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, Errors{{File: path, Msg: fmt.Sprintf("cannot read config: %v", unwrapPathError(err))}}
	}
	decode(data, &l.Cluster, r)
	if len(r.errs) == 0 {
		defaults := applyDefaults(&l.Cluster, func(p string) bool { return r.set[p] })
		v := &validator{report: r, fs: env, defaults: defaults}
		v.cluster(&l.Cluster)
		if key, err := os.ReadFile(env.Expand(l.Cluster.Spec.VM.SSHPublicKeyFile)); err == nil {
			l.AuthorizedKey = strings.TrimSpace(string(key))
		}
	}
	errs := r.errs
	errs = append(errs, l.loadSecrets(secretsPath)...)
	if len(errs) > 0 {
		return nil, errs.sorted()
	}
	l.derive()
	return l, nil
}

// derive parses, once, the values the file writes as text; validation has
// already refused any that do not parse.
func (l *Loaded) derive() {
	s := &l.Cluster.Spec
	s.VM.Net, _ = netip.ParsePrefix(s.VM.Address)
	for i := range s.Servers {
		s.Servers[i].Net, _ = netip.ParsePrefix(s.Servers[i].Address)
	}
	s.VIP.Addr, _ = netip.ParseAddr(s.VIP.Address)
	s.Inspector.TTL, _ = time.ParseDuration(s.Inspector.TokenTTL)
	s.SSH.Interval, _ = time.ParseDuration(s.SSH.ServerAliveInterval)
	s.K3s.Release, _ = ParseK3sRelease(s.K3s.Version)
}

func (l *Loaded) loadSecrets(explicit string) Errors {
	l.SecretsPath = explicit
	if explicit == "" {
		l.SecretsPath = filepath.Join(filepath.Dir(l.Path), "secrets.yaml")
	}
	r := &report{file: l.SecretsPath, lines: map[string]int{}}
	fi, err := os.Stat(l.SecretsPath)
	switch {
	case errors.Is(err, fs.ErrNotExist) && explicit == "":
		// No file is fine: the secret may come from the environment, and
		// only the capi phase needs it (see RequireSecret).
	case err != nil:
		r.addNoValue("", "cannot read secrets: %v", unwrapPathError(err))
	case fi.Mode().Perm()&0o077 != 0:
		r.addNoValue("", "secrets file is readable by group or others (mode %04o); run: chmod 600 %s", fi.Mode().Perm(), l.SecretsPath)
	default:
		data, err := os.ReadFile(l.SecretsPath)
		if err != nil {
			r.addNoValue("", "cannot read secrets: %v", unwrapPathError(err))
			break
		}
		decode(data, &l.Secrets, r)
		if len(r.errs) == 0 && l.Secrets.Proxmox.TokenSecret != "" {
			l.SecretSource = l.SecretsPath
		}
	}
	if s := l.Env.Getenv(SecretEnv); s != "" {
		l.Secrets.Proxmox.TokenSecret = s
		l.SecretSource = SecretEnv
	}
	if s := l.Env.Getenv(MgmtctlSecretEnv); s != "" {
		l.Secrets.Proxmox.MgmtctlTokenSecret = s
	}
	if s := l.Env.Getenv(S3AccessKeyEnv); s != "" {
		l.Secrets.S3.AccessKey = s
	}
	if s := l.Env.Getenv(S3SecretKeyEnv); s != "" {
		l.Secrets.S3.SecretKey = s
	}
	if len(r.errs) == 0 {
		v := &validator{report: r}
		v.secrets(&l.Secrets, l.SecretSource)
		v.s3Secrets(l.Secrets.S3, l.Cluster.Spec.Backup.S3 != nil)
		v.mgmtctlSecret(l.Secrets.Proxmox)
	}
	return r.errs
}

// RequireSecret reports, as a config error, that the token secret is
// missing. Phases that hand credentials to CAPMOX call it before any
// connection is opened.
func (l *Loaded) RequireSecret() error {
	if l.Secrets.Proxmox.TokenSecret != "" {
		return nil
	}
	return Errors{{File: l.SecretsPath, Path: "proxmox.tokenSecret",
		Msg: fmt.Sprintf("is required for the capi phase: write it to %s (mode 0600) or set %s", l.SecretsPath, SecretEnv)}}
}

// RequireMgmtctlSecret reports, as a config error, that mgmtctl's own
// token secret is missing in api access: every run that reaches Proxmox
// needs it (`mgmtctl proxmox role --for mgmtctl` makes the token).
func (l *Loaded) RequireMgmtctlSecret() error {
	if !l.Cluster.Spec.Proxmox.API() || l.Secrets.Proxmox.MgmtctlTokenSecret != "" {
		return nil
	}
	return Errors{{File: l.SecretsPath, Path: "proxmox.mgmtctlTokenSecret",
		Msg: fmt.Sprintf("is required by spec.proxmox.access: api: write it to %s (mode 0600) or set %s; `mgmtctl proxmox role --for mgmtctl` prints the commands that make the token", l.SecretsPath, MgmtctlSecretEnv)}}
}

// Servers is the cluster's k3s servers, the first one the cluster was
// initialised on: spec.servers, or the single server of spec.proxmox and
// spec.vm when it is not given.
func (l *Loaded) Servers() []Server {
	s := l.Cluster.Spec
	if len(s.Servers) > 0 {
		return s.Servers
	}
	return []Server{{Name: l.Cluster.Metadata.Name, Node: s.Proxmox.Node, Host: s.Proxmox.Host,
		ID: s.VM.ID, Address: s.VM.Address, Net: s.VM.Net}}
}

// APIAddr is the address the laptop, the kubeconfigs and CAPMOX reach the
// cluster's API at: the VIP when there is one, else the server's address.
func (l *Loaded) APIAddr() netip.Addr {
	if a := l.Cluster.Spec.VIP.Addr; a.IsValid() {
		return a
	}
	return l.Servers()[0].Net.Addr()
}

// KubeconfigPath is the admin kubeconfig's path on the laptop.
func (l *Loaded) KubeconfigPath() string { return l.Env.Expand(l.Cluster.Spec.Kubeconfig.Path) }

package k3s

import (
	"context"
	"fmt"
	"strings"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Secrets encrypted at rest on a cluster k3s initialised without
// secrets-encryption: k3s's own procedure (k3s-io/k3s pull request
// #13370, "Enable secret encryption on existing clusters", backported to
// release-1.35 by #13403; docs/upstream.md §2.11), carried out by apply:
//
//  1. EnableEncryption: `k3s secrets-encrypt enable` on the seed server
//     writes an encryption config of the identity provider alone and
//     saves it in the bootstrap data;
//  2. each server's config step writes secrets-encryption: true, and its
//     restart step restarts it behind the quorum gate: it takes the
//     identity config from the bootstrap data (no server makes a key of
//     its own, the fault of k3s-io/k3s#7195) and starts at stage start;
//  3. RotateKeys: `k3s secrets-encrypt rotate-keys` on the seed adds an
//     AES-CBC key first, waits for its API server to reload the config
//     and writes every Secret again, now encrypted;
//  4. KeyRestart: every other server restarts, one at a time behind the
//     quorum gate, to take the new config from the bootstrap data.
//
// Each step decides from what the servers hold (Encryption), so a run
// cut short anywhere is completed by the next.

// Encryption is a server's secrets-encryption config
// (EncryptionConfigPath) as read: its first provider, the one that
// writes, and the file's sha256 (the hash k3s's stages and node
// annotations carry). The key itself is never read off the VM.
type Encryption struct {
	// Provider is "" when the server holds no config, else "identity"
	// (Secrets written in clear: the config enable writes) or the
	// encrypting provider ("aescbc", "secretbox").
	Provider string
	Hash     string
}

// Held says the server holds an encryption config.
func (e Encryption) Held() bool { return e.Provider != "" }

// Encrypts says new Secrets are written encrypted.
func (e Encryption) Encrypts() bool { return e.Provider != "" && e.Provider != "identity" }

// parseEncryption reads remote.EncryptionConfigSummary's output.
func parseEncryption(out []byte) Encryption {
	f := strings.Fields(string(out))
	if len(f) < 2 {
		return Encryption{}
	}
	return Encryption{Hash: f[0], Provider: f[1]}
}

// readEncryption reads v's encryption config now.
func readEncryption(ctx context.Context, v *VM) (Encryption, error) {
	res, err := v.Host.Look(ctx, remote.EncryptionConfigSummary(EncryptionConfigPath).AsRoot())
	if err != nil {
		return Encryption{}, fmt.Errorf("read the secrets-encryption config on %s: %w", v.Name(), err)
	}
	return parseEncryption(res.Stdout), nil
}

// EnableEncryption is step 1: on a cluster k3s initialised without
// secrets-encryption (no server holds a config), `k3s secrets-encrypt
// enable` on the seed. It comes before every server's config step: a
// server restarted with secrets-encryption while the cluster has no
// config would make a key of its own.
type EnableEncryption struct {
	VMs  []*VM
	Seed func() *VM
}

// ID implements step.Step.
func (s *EnableEncryption) ID() string { return "secrets-encryption-enable" }

// Host implements step.Step.
func (s *EnableEncryption) Host() string { return s.Seed().Name() }

// Independent implements step.Independent: it decides on what Prepare
// gathered.
func (s *EnableEncryption) Independent() {}

// Check implements step.Step.
func (s *EnableEncryption) Check(ctx context.Context) (step.Plan, error) {
	held, initialised := gathered(s.VMs)
	if held {
		return step.Plan{Note: "the cluster holds a secrets-encryption config"}, nil
	}
	if !initialised {
		return step.Plan{Note: firstStartMakesKey}, nil
	}
	seed := s.Seed()
	if seed.Host == nil || !seed.Active {
		return step.Plan{}, fmt.Errorf("secrets-encryption cannot be turned on: k3s is not running on %s, whose k3s secrets-encrypt enable every server then follows; start it (systemctl start k3s) and run apply again", seed.Name())
	}
	return step.Plan{Changes: []step.Change{{Target: "secrets-encryption", Action: step.Run,
		Summary: "turn secrets-encryption on (k3s secrets-encrypt enable: the identity provider, which each server loads as it restarts with secrets-encryption; rotate-keys then encrypts every Secret)",
		Effects: []effect.Effect{seed.run(remote.Command("k3s", "secrets-encrypt", "enable").AsRoot())}}}}, nil
}

// Finish implements step.Finisher.
func (s *EnableEncryption) Finish(ctx context.Context, out []remote.Result, err error) error {
	if err != nil {
		return fmt.Errorf("k3s secrets-encrypt enable on %s: %w", s.Seed().Name(), err)
	}
	return nil
}

// RotateKeys is step 3: once every server runs with the identity config,
// `k3s secrets-encrypt rotate-keys` on the seed, which encrypts every
// Secret with a new AES-CBC key. It reads the seed's config at its turn
// (the run's earlier steps wrote it).
type RotateKeys struct {
	VMs  []*VM
	Seed func() *VM
}

// ID implements step.Step.
func (s *RotateKeys) ID() string { return "secrets-encryption-rotate-keys" }

// Host implements step.Step.
func (s *RotateKeys) Host() string { return s.Seed().Name() }

// Check implements step.Step.
func (s *RotateKeys) Check(ctx context.Context) (step.Plan, error) {
	done := "Secrets are encrypted at rest"
	all := true
	for _, v := range s.VMs {
		all = all && v.Encryption.Encrypts()
	}
	if all {
		return step.Plan{Note: done}, nil
	}
	seed := s.Seed()
	if seed.Host == nil {
		return step.Plan{Skip: "k3s is not installed yet; it makes the cluster's key as it first starts"}, nil
	}
	enc, err := readEncryption(ctx, seed)
	if err != nil {
		return step.Plan{}, err
	}
	if enc.Encrypts() {
		return step.Plan{Note: done}, nil
	}
	if !enc.Held() && !encryptionPending(s.VMs) {
		// A cluster k3s has not started yet: its first start makes the key.
		return step.Plan{Note: firstStartMakesKey}, nil
	}
	return step.Plan{Changes: []step.Change{{Target: "secrets-encryption", Action: step.Run,
		Summary: "encrypt every Secret (k3s secrets-encrypt rotate-keys: a new AES-CBC key first, every Secret written again)",
		Effects: []effect.Effect{seed.run(remote.Command("k3s", "secrets-encrypt", "rotate-keys").AsRoot())}}}}, nil
}

// firstStartMakesKey is the steps' note on a cluster k3s has not
// started yet.
const firstStartMakesKey = "k3s makes the cluster's key as its first server starts"

// gathered says, from what Prepare gathered, whether any server holds an
// encryption config and whether k3s has run as a server on any.
func gathered(vms []*VM) (held, initialised bool) {
	for _, v := range vms {
		held = held || v.Encryption.Held()
		initialised = initialised || v.Initialised
	}
	return held, initialised
}

// encryptionPending says the cluster is one EnableEncryption turns
// secrets-encryption on for: initialised, no server with a config.
func encryptionPending(vms []*VM) bool {
	held, initialised := gathered(vms)
	return !held && initialised
}

// Finish implements step.Finisher.
func (s *RotateKeys) Finish(ctx context.Context, out []remote.Result, err error) error {
	if err != nil {
		return fmt.Errorf("k3s secrets-encrypt rotate-keys on %s (k3s secrets-encrypt status there says which server is behind): %w", s.Seed().Name(), err)
	}
	return nil
}

// KeyRestart is step 4 for one server: k3s reads the bootstrap data, and
// so the key rotate-keys made, only as it starts; a server whose config
// is not the seed's restarts, behind the quorum gate, and its node is
// waited for as after any restart.
type KeyRestart struct {
	*NodeReady
	Seed func() *VM
	// VMs are the cluster's servers, for the check run before
	// rotate-keys has made the key.
	VMs []*VM
	// restarted is set once this run restarted k3s here (Finish): only
	// then is the node waited for, so that a converged run reads nothing
	// more for this step than its Check did.
	restarted bool
}

var _ step.Waiter = (*KeyRestart)(nil)

// Observe implements step.Waiter: the node, once k3s was restarted here.
func (s *KeyRestart) Observe(ctx context.Context) (bool, string, error) {
	if !s.restarted {
		return true, "", nil
	}
	return s.NodeReady.Observe(ctx)
}

// Wait implements step.Waiter.
func (s *KeyRestart) Wait(ctx context.Context) error {
	if !s.restarted {
		return nil
	}
	return s.NodeReady.Wait(ctx)
}

// ID implements step.Step.
func (s *KeyRestart) ID() string { return "restart-k3s-for-key" }

// Check implements step.Step.
func (s *KeyRestart) Check(ctx context.Context) (step.Plan, error) {
	seed := s.Seed()
	if s.V == seed {
		return step.Plan{Note: "rotate-keys ran here; its API server reloaded the config"}, nil
	}
	if s.V.Host == nil || s.V.Installed == "" || seed.Host == nil {
		return step.Plan{Skip: "k3s is not installed yet; it takes the cluster's key as it starts"}, nil
	}
	if encryptAlike(s.VMs) {
		// The converged cluster, as gathered: nothing to read again.
		return step.Plan{Note: "k3s holds the cluster's secrets-encryption key"}, nil
	}
	want, err := readEncryption(ctx, seed)
	if err != nil {
		return step.Plan{}, err
	}
	restart := step.Plan{Changes: []step.Change{{Target: "k3s.service", Action: step.Run,
		Effects: []effect.Effect{s.V.run(remote.Command("systemctl", "restart", "k3s").AsRoot())}}}}
	if !want.Encrypts() {
		if !want.Held() && !encryptionPending(s.VMs) {
			return step.Plan{Note: firstStartMakesKey}, nil
		}
		// Checked before rotate-keys has run (check mode): it will.
		restart.Changes[0].Summary = "restart k3s to load the key k3s secrets-encrypt rotate-keys makes on " + seed.Name()
		return s.V.gate(ctx, restart)
	}
	got, err := readEncryption(ctx, s.V)
	if err != nil {
		return step.Plan{}, err
	}
	if got.Hash == want.Hash {
		return step.Plan{Note: "k3s holds the cluster's secrets-encryption key"}, nil
	}
	restart.Changes[0].Summary = "restart k3s to load the secrets-encryption key rotate-keys made on " + seed.Name()
	return s.V.gate(ctx, restart)
}

// encryptAlike says every server, as gathered, encrypts with one config.
func encryptAlike(vms []*VM) bool {
	for _, v := range vms {
		if !v.Encryption.Encrypts() || v.Encryption.Hash != vms[0].Encryption.Hash {
			return false
		}
	}
	return true
}

// Finish implements step.Finisher.
func (s *KeyRestart) Finish(ctx context.Context, out []remote.Result, err error) error {
	if err != nil {
		return fmt.Errorf("restart k3s: %w", err)
	}
	s.restarted = true
	return nil
}

package k3s

import (
	"context"
	"strings"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/remote/remotetest"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// encryptionHost answers EncryptionConfigSummary with enc, as k3s's
// files would have it.
func encryptionHost(name string, enc Encryption) *remotetest.Host {
	return &remotetest.Host{HostName: name, Answer: func(c remote.Cmd) (remote.Result, error) {
		if c.Name == remote.EncryptionConfigSummary(EncryptionConfigPath).Cmd().Name && enc.Held() {
			return remote.Result{Stdout: []byte(enc.Hash + " " + enc.Provider + "\n")}, nil
		}
		return remote.Result{}, nil
	}}
}

// TestSecretsEncryptionSteps: each step of turning secrets-encryption on
// decides from what the servers hold, so that every state a run can be
// cut short in is taken up by the next: enable only while no server
// holds a config (never twice: k3s's handler fails on an identity-only
// config), rotate-keys while the seed's config is the identity
// provider's, a restart of each other server whose config is not the
// seed's after it, nothing on a cluster that encrypts or that k3s has
// not started yet.
func TestSecretsEncryptionSteps(t *testing.T) {
	none := Encryption{}
	identity := Encryption{Provider: "identity", Hash: "1d"}
	aescbc := Encryption{Provider: "aescbc", Hash: "ae"}
	for _, c := range []struct {
		name        string
		initialised bool
		servers     []Encryption // as gathered, the first the seed
		live        []Encryption // now, at the steps' turn
		enable      bool
		rotate      bool
		restart     []bool
	}{
		{"a new cluster", false, []Encryption{none, none, none}, []Encryption{none, none, none}, false, false, []bool{false, false, false}},
		{"a cluster without it", true, []Encryption{none, none, none}, []Encryption{none, none, none}, true, true, []bool{false, true, true}},
		{"a lone server without it", true, []Encryption{none}, []Encryption{none}, true, true, []bool{false}},
		{"enabled, not all restarted", true, []Encryption{identity, none, none}, []Encryption{identity, none, none}, false, true, []bool{false, true, true}},
		{"every server on identity", true, []Encryption{identity, identity, identity}, []Encryption{identity, identity, identity}, false, true, []bool{false, true, true}},
		{"rotated, others behind", true, []Encryption{aescbc, identity, identity}, []Encryption{aescbc, identity, aescbc}, false, false, []bool{false, true, false}},
		{"encrypting", true, []Encryption{aescbc, aescbc, aescbc}, []Encryption{aescbc, aescbc, aescbc}, false, false, []bool{false, false, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			pin := config.K3sRelease{Major: 1, Minor: 35, Patch: 7, Build: 1}
			var vms []*VM
			for i, e := range c.servers {
				name := []string{"s1", "s2", "s3"}[i]
				vms = append(vms, &VM{Spec: Spec{Name: name, Version: pin}, Host: remote.ReadOnly(encryptionHost(name, c.live[i])),
					Installed: pin.String(), Active: true, Initialised: c.initialised, Encryption: e})
			}
			if !c.initialised {
				for _, v := range vms {
					v.Host, v.Installed = nil, ""
				}
			}
			seed := func() *VM { return vms[0] }
			planned := func(s step.Step) bool {
				p, err := s.Check(ctx)
				if err != nil {
					t.Fatalf("%s: %v", s.ID(), err)
				}
				return !p.Empty()
			}
			if got := planned(&EnableEncryption{VMs: vms, Seed: seed}); got != c.enable {
				t.Errorf("enable planned: %v, want %v", got, c.enable)
			}
			if got := planned(&RotateKeys{VMs: vms, Seed: seed}); got != c.rotate {
				t.Errorf("rotate-keys planned: %v, want %v", got, c.rotate)
			}
			for i, v := range vms {
				if got := planned(&KeyRestart{NodeReady: &NodeReady{V: v}, Seed: seed, VMs: vms}); got != c.restart[i] {
					t.Errorf("%s restart planned: %v, want %v", v.Name(), got, c.restart[i])
				}
			}
		})
	}
}

// TestEnableNeedsARunningSeed: on a cluster without secrets-encryption
// whose seed's k3s is stopped, the run stops before any config.yaml asks
// for it (each server would make a key of its own).
func TestEnableNeedsARunningSeed(t *testing.T) {
	v := &VM{Spec: Spec{Name: "s1"}, Host: remote.ReadOnly(encryptionHost("s1", Encryption{})), Initialised: true}
	_, err := (&EnableEncryption{VMs: []*VM{v}, Seed: func() *VM { return v }}).Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "k3s is not running on s1") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseEncryption(t *testing.T) {
	for out, want := range map[string]Encryption{
		"":               {},
		"abc aescbc\n":   {Provider: "aescbc", Hash: "abc"},
		"abc identity\n": {Provider: "identity", Hash: "abc"},
		"abc unknown\n":  {Provider: "unknown", Hash: "abc"},
	} {
		if got := parseEncryption([]byte(out)); got != want {
			t.Errorf("%q: %+v, want %+v", out, got, want)
		}
	}
}

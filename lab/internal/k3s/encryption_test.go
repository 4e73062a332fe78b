package k3s

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	apiserverconfigv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
)

// TestSecretsEncryption: config.yaml's secrets-encryption is read; the
// first start writes upstream's config (0600: aescbc with a 32-byte key
// named aescbckey, then identity) and its state hash; a later start, or a
// config the bootstrap data brought, keeps the key.
func TestSecretsEncryption(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.yaml")
	os.WriteFile(p, []byte("cluster-init: true\nsecrets-encryption: true\n"), 0o600)
	if c, err := LoadConfig(p); err != nil || !c.SecretsEncryption || len(c.Unknown) != 0 {
		t.Fatalf("%+v, %v", c, err)
	}

	path := filepath.Join(dir, encryptionConfigFile)
	made, err := genEncryptionConfig(path)
	if err != nil || !made {
		t.Fatalf("first start: made %v, %v", made, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
	var c apiserverconfigv1.EncryptionConfiguration
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Resources) != 1 || len(c.Resources[0].Resources) != 1 || c.Resources[0].Resources[0] != "secrets" || len(c.Resources[0].Providers) != 2 {
		t.Fatalf("config: %s", b)
	}
	aes, identity := c.Resources[0].Providers[0].AESCBC, c.Resources[0].Providers[1].Identity
	if aes == nil || identity == nil || len(aes.Keys) != 1 || aes.Keys[0].Name != "aescbckey" {
		t.Fatalf("providers: %s", b)
	}
	if key, err := base64.StdEncoding.DecodeString(aes.Keys[0].Secret); err != nil || len(key) != 32 {
		t.Errorf("key: %d bytes, %v", len(key), err)
	}
	h := sha256.Sum256(b)
	if state, _ := os.ReadFile(filepath.Join(dir, "cred", "encryption-state.json")); string(state) != "start-"+hex.EncodeToString(h[:]) {
		t.Errorf("state: %q", state)
	}

	made, err = genEncryptionConfig(path)
	if again, _ := os.ReadFile(path); err != nil || made || string(again) != string(b) {
		t.Errorf("second start: made %v, %v, the key changed: %v", made, err, string(again) != string(b))
	}
}

// TestIdentityConfigGetsItsState: the identity-only config `k3s
// secrets-encrypt enable` writes on a server started without
// secrets-encryption has no state beside it; the first start with
// secrets-encryption keeps the config and writes its state,
// "start-<sha256 of the config>", as upstream does for a config from an
// older version.
func TestIdentityConfigGetsItsState(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, encryptionConfigFile)
	if err := writeEncryptionConfig(path, []apiserverconfigv1.ProviderConfiguration{{Identity: &apiserverconfigv1.IdentityConfiguration{}}}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), `"providers":[{"identity":{}}]`) {
		t.Fatalf("identity config: %s", b)
	}
	made, err := genEncryptionConfig(path)
	if again, _ := os.ReadFile(path); err != nil || made || string(again) != string(b) {
		t.Fatalf("made %v, %v, config %s", made, err, again)
	}
	h := sha256.Sum256(b)
	if state, _ := os.ReadFile(filepath.Join(dir, "cred", "encryption-state.json")); string(state) != "start-"+hex.EncodeToString(h[:]) {
		t.Errorf("state: %q", state)
	}
}

// TestStatusText: the status's text as upstream's CLI prints it, and its
// JSON with -o json.
func TestStatusText(t *testing.T) {
	yes, no := true, false
	for _, c := range []struct {
		st   encryptionState
		want string
	}{
		{encryptionState{}, "Encryption Status: Disabled, no configuration file found\n"},
		{encryptionState{Enable: &no, Stage: "start", HashMatch: true}, "Encryption Status: Disabled\nCurrent Rotation Stage: start\nServer Encryption Hashes: All hashes match\n\nActive  Key Type  Name\n------  --------  ----\n\n"},
		{encryptionState{Enable: &yes, Stage: "reencrypt_finished", HashError: "hash does not match between a and b", ActiveKey: "AES-CBC aescbckey-1"},
			"Encryption Status: Enabled\nCurrent Rotation Stage: reencrypt_finished\nServer Encryption Hashes: hash does not match between a and b\n\nActive  Key Type  Name\n------  --------  ----\n *      AES-CBC   AES-CBC aescbckey-1\n\n"},
	} {
		var b strings.Builder
		printStatus(&b, c.st, "")
		if b.String() != c.want {
			t.Errorf("%+v:\n%q\nwant\n%q", c.st, b.String(), c.want)
		}
	}
	var b strings.Builder
	printStatus(&b, encryptionState{Enable: &yes, Stage: "start", HashMatch: true}, "json")
	if b.String() != "{\n\t\"stage\": \"start\",\n\t\"activekey\": \"\",\n\t\"enable\": true,\n\t\"hashmatch\": true\n}\n" {
		t.Errorf("json: %q", b.String())
	}
}

package k3s

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	apiserverconfigv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
)

// k3s's secrets-encryption (docs.k3s.io security/secrets-encryption): the
// first server to start with it generates an AES-CBC key and an
// EncryptionConfiguration holding it, which its kube-apiserver reads
// (--encryption-provider-config), so etcd, and every snapshot of it, holds
// Secrets encrypted. As upstream k3s (pkg/daemons/control/deps/deps.go,
// genEncryptionConfigAndState; paths from FillRuntimeCerts): the config is
// server/cred/encryption-config.json (0600), a 32-byte key named
// "aescbckey", aescbc first (what is written) then identity (Secrets
// written before, still read); beside it the hash k3s secrets-encrypt
// tracks its stages by, server/cred/encryption-state.json, "start-<sha256
// of the config>". The config travels in the bootstrap data
// (bootstrapFiles), so every server of a cluster has the same key.

// encryptionConfigFile is the config's path under DataDir.
const encryptionConfigFile = "cred/encryption-config.json"

// aescbcKeySize is upstream's (deps.go): AES-256.
const aescbcKeySize = 32

// genEncryptionConfig writes the config at path unless one is there
// (from the bootstrap data, or an earlier start); made says it wrote one.
// A config with no state beside it (one `k3s secrets-encrypt enable`
// wrote on a server started without secrets-encryption) gets its state,
// "start-<hash>" (upstream: "On upgrade from older versions, the
// encryption hash may not exist, create it").
func genEncryptionConfig(path string) (made bool, err error) {
	if st, err := os.Stat(path); err == nil && st.Size() > 0 {
		if _, err := os.Stat(statePath(path)); !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
		return false, writeStartState(path)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	key := make([]byte, aescbcKeySize)
	if _, err := rand.Read(key); err != nil {
		return false, err
	}
	if err := writeEncryptionConfig(path, []apiserverconfigv1.ProviderConfiguration{
		{AESCBC: &apiserverconfigv1.AESConfiguration{Keys: []apiserverconfigv1.Key{{Name: "aescbckey", Secret: base64.StdEncoding.EncodeToString(key)}}}},
		{Identity: &apiserverconfigv1.IdentityConfiguration{}},
	}); err != nil {
		return false, err
	}
	return true, writeStartState(path)
}

// statePath is the state file beside the config at path.
func statePath(config string) string {
	return filepath.Join(filepath.Dir(config), filepath.Base(encryptionStateFile))
}

// writeStartState records the config at path as at stage start,
// "start-<sha256 of the config>".
func writeStartState(config string) error {
	h, err := configHash(config)
	if err != nil {
		return err
	}
	return writeFile(statePath(config), []byte("start-"+h), 0o600)
}

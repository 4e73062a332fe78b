package k3s

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		state := filepath.Join(filepath.Dir(path), "encryption-state.json")
		if _, err := os.Stat(state); !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return false, err
		}
		h := sha256.Sum256(b)
		return false, writeFile(state, []byte("start-"+hex.EncodeToString(h[:])), 0o600)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	key := make([]byte, aescbcKeySize)
	if _, err := rand.Read(key); err != nil {
		return false, err
	}
	b, err := json.Marshal(apiserverconfigv1.EncryptionConfiguration{
		TypeMeta: metav1.TypeMeta{Kind: "EncryptionConfiguration", APIVersion: "apiserver.config.k8s.io/v1"},
		Resources: []apiserverconfigv1.ResourceConfiguration{{
			Resources: []string{"secrets"},
			Providers: []apiserverconfigv1.ProviderConfiguration{
				{AESCBC: &apiserverconfigv1.AESConfiguration{Keys: []apiserverconfigv1.Key{{Name: "aescbckey", Secret: base64.StdEncoding.EncodeToString(key)}}}},
				{Identity: &apiserverconfigv1.IdentityConfiguration{}},
			},
		}},
	})
	if err != nil {
		return false, err
	}
	if err := writeFile(path, b, 0o600); err != nil {
		return false, err
	}
	h := sha256.Sum256(b)
	return true, writeFile(filepath.Join(filepath.Dir(path), "encryption-state.json"), []byte("start-"+hex.EncodeToString(h[:])), 0o600)
}

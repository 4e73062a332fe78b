package config

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"text/template"
)

//go:embed templates
var templates embed.FS

// PublicKeyCandidates are the public keys init looks for, in order.
var PublicKeyCandidates = []string{"~/.ssh/id_ed25519.pub", "~/.ssh/id_ecdsa.pub", "~/.ssh/id_rsa.pub"}

// InitFile is one file written by Init.
type InitFile struct {
	Path    string
	Written bool // false when the file existed and was left alone
}

// Init writes a commented mgmt.yaml at configPath and secrets.yaml.example
// beside it. It never overwrites an existing file.
func Init(configPath string, env Env) ([]InitFile, error) {
	key := PublicKeyCandidates[0]
	for _, k := range PublicKeyCandidates {
		if _, err := os.Stat(env.Expand(k)); err == nil {
			key = k
			break
		}
	}
	rendered, err := renderInit(key)
	if err != nil {
		return nil, err
	}
	example, err := templates.ReadFile("templates/secrets.yaml.example")
	if err != nil {
		return nil, err
	}
	var out []InitFile
	for _, f := range []struct {
		path string
		data []byte
	}{
		{configPath, rendered},
		{filepath.Join(filepath.Dir(configPath), "secrets.yaml.example"), example},
	} {
		written, err := writeNew(f.path, f.data)
		if err != nil {
			return out, err
		}
		out = append(out, InitFile{Path: f.path, Written: written})
	}
	return out, nil
}

func renderInit(sshKey string) ([]byte, error) {
	t, err := template.ParseFS(templates, "templates/mgmt.yaml.tmpl")
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err = t.Execute(&b, map[string]string{
		"ImageURL": DefaultImageURL, "ImageSHA256": DefaultImageSHA256,
		"SSHPublicKeyFile": sshKey,
		"K3sVersion":       DefaultK3sVersion, "K3sInstallScript": DefaultK3sInstallScript,
		"CertManager": DefaultCertManager, "CertManagerRepo": DefaultCertManagerRepo,
		"Operator": DefaultOperator, "OperatorRepo": DefaultOperatorRepo,
		"CAPI": DefaultCAPIVersion, "CAPMOX": DefaultCAPMOXVersion, "IPAM": DefaultIPAMVersion,
		"TokenTTL": DefaultTokenTTL,
	})
	return b.Bytes(), err
}

// writeNew creates path with data unless it exists (O_EXCL: no race with a
// file created in between).
func writeNew(path string, data []byte) (bool, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	return true, f.Close()
}

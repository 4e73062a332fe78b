// Package localfile writes files on the laptop the one way mgmtctl writes
// them: atomically (a temporary file in the same directory, synced, then
// renamed over the target) and private (mode 0600, a new directory 0700),
// since what it writes there holds credentials or trust (kubeconfigs,
// known_hosts).
package localfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data.
func Write(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// CreateTemp makes the file 0600.
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

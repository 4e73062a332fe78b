package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mgmtctl/mgmtctl/internal/localfile"
)

// Write stores a backup in dir (created; it must not exist yet), for the
// tests that need one on disk: the same files, in the same order, as
// Fetch's plan writes them, backup.json last (a directory without one is
// an interrupted backup, which List skips).
func Write(dir string, m Manifest, snapshot, token, config []byte) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("backup %s exists already", dir)
	}
	sum := sha256.Sum256(snapshot)
	m.SHA256, m.Size = hex.EncodeToString(sum[:]), int64(len(snapshot))
	man, err := manifestBytes(m)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{
		{snapshotFile, snapshot},
		{sumFile, sumLine(m.SHA256)},
		{tokenFile, append([]byte(strings.TrimSpace(string(token))), '\n')},
		{configFile, config},
		{manifestFile, man},
	} {
		if err := localfile.Write(filepath.Join(dir, f.name), f.data); err != nil {
			return fmt.Errorf("write backup %s: %w", dir, err)
		}
	}
	return nil
}

// Package backup takes the management cluster's etcd snapshot to the
// laptop and puts it back: k3s's own `etcd-snapshot save` and
// `--cluster-reset --cluster-reset-restore-path` (docs.k3s.io
// cli/etcd-snapshot), with the server token the snapshot needs, the config
// and the pins it was taken with.
package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/s3layout"
)

// Paths on the VM (k3s's defaults).
const (
	SnapshotDir = "/var/lib/rancher/k3s/server/db/snapshots"
	TokenPath   = "/var/lib/rancher/k3s/server/token"
	// SnapshotName is the base name of mgmtctl's snapshots; k3s appends
	// the node and a timestamp.
	SnapshotName = "mgmtctl"
)

// The files of one backup directory. Every file is 0600 in a 0700
// directory: the snapshot holds the cluster's Secrets, the token decrypts
// its bootstrap data.
const (
	snapshotFile = "snapshot"
	sumFile      = "snapshot.sha256"
	tokenFile    = "token"
	configFile   = "mgmt.yaml"
	manifestFile = "backup.json"
)

// Manifest is backup.json: what the backup is and what it was taken with.
type Manifest struct {
	Cluster  string    `json:"cluster"`
	Created  time.Time `json:"created"`
	Snapshot string    `json:"snapshot"` // k3s's name for it
	SHA256   string    `json:"sha256"`
	Size     int64     `json:"size"`
	// Pins are the versions the config pinned (k3s, charts, providers).
	Pins map[string]string `json:"pins"`
	// Reason is why apply took it, before a risky change ("before
	// upgrading k3s from … to …"); empty for `mgmtctl backup`'s.
	Reason string `json:"reason,omitempty"`
}

// Backup is one backup directory on the laptop, or (S3 set) a snapshot
// in spec.backup.s3's bucket, named so.
type Backup struct {
	Dir string
	S3  string
	Manifest
}

// Snapshot is one line of `k3s etcd-snapshot ls`: a snapshot on the
// server (file://) or in the bucket (s3://).
type Snapshot struct {
	Name, Location string
	Size           int64
	Created        time.Time
}

// InS3 says the snapshot is the bucket's.
func (s Snapshot) InS3() bool { return strings.HasPrefix(s.Location, "s3://") }

// InBucket is a snapshot in spec.backup.s3's bucket, with where it is.
type InBucket struct {
	Snapshot
	// Dir is the folder the object is in (its key's directory).
	Dir string
	// Cluster is the id of the cluster that uploaded it
	// (s3layout.ClusterOf); "" for the layout before per-cluster
	// folders.
	Cluster string
}

// FindInBucket is snapshot name in bucket under folder, as k3s on host
// (its name, for the message) lists it: an error when the bucket does not
// have it, or has it in more than one folder.
func FindInBucket(ctx context.Context, h remote.Reader, host, bucket, folder, name string) (InBucket, error) {
	inBucket, err := ListBucket(ctx, h, bucket, folder)
	if err != nil {
		return InBucket{}, fmt.Errorf("list the snapshots in S3 from %s: %w", host, err)
	}
	var found []InBucket
	for _, sn := range inBucket {
		if sn.Name == name {
			found = append(found, sn)
		}
	}
	switch {
	case len(found) == 0:
		return InBucket{}, fmt.Errorf("no snapshot %s in the bucket of spec.backup.s3 (as k3s on %s lists it): mgmtctl backup --list shows the snapshots there", name, host)
	case len(found) > 1:
		var where []string
		for _, f := range found {
			where = append(where, f.Location)
		}
		return InBucket{}, fmt.Errorf("snapshot %s is in %d folders of the bucket (%s): move or delete all but the one to restore", name, len(found), strings.Join(where, ", "))
	}
	return found[0], nil
}

// ListBucket lists the snapshots in bucket under folder as k3s on h
// lists them (EtcdSnapshotsUnder: every cluster's and server's folder,
// and the layout before them): the laptop itself never speaks to S3.
func ListBucket(ctx context.Context, h remote.Reader, bucket, folder string) ([]InBucket, error) {
	res, err := h.Look(ctx, remote.EtcdSnapshotsUnder(folder).AsRoot())
	if err != nil {
		return nil, err
	}
	return Bucketed(string(res.Stdout), bucket, folder), nil
}

// Bucketed is the snapshots of `k3s etcd-snapshot ls` in bucket under
// folder (spec.backup.s3's), each with its folder and cluster. k3s lists
// by key prefix, so a folder "k3s/mgmt" also lists "k3s/mgmt2/…": only
// the folder and what is under it are kept.
func Bucketed(ls, bucket, folder string) []InBucket {
	var out []InBucket
	for _, sn := range ParseSnapshots(ls) {
		key, ok := strings.CutPrefix(sn.Location, "s3://"+bucket+"/")
		if !ok {
			continue
		}
		dir := path.Dir(key)
		if dir == "." {
			dir = ""
		}
		if folder != "" && dir != folder && !strings.HasPrefix(dir, folder+"/") {
			continue
		}
		out = append(out, InBucket{Snapshot: sn, Dir: dir, Cluster: s3layout.ClusterOf(folder, dir)})
	}
	return out
}

// ParseSnapshots reads `k3s etcd-snapshot ls`: a header, then name,
// location, size and creation time (RFC 3339) per line; lines that do not
// parse are skipped.
func ParseSnapshots(ls string) []Snapshot {
	var out []Snapshot
	for _, line := range strings.Split(ls, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		size, err1 := strconv.ParseInt(f[2], 10, 64)
		t, err2 := time.Parse(time.RFC3339, f[3])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, Snapshot{Name: f[0], Location: f[1], Size: size, Created: t})
	}
	return out
}

// manifestBytes is backup.json's content.
func manifestBytes(m Manifest) ([]byte, error) {
	man, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(man, '\n'), nil
}

// sumLine is snapshot.sha256's content, as sha256sum writes it.
func sumLine(sum string) []byte { return []byte(sum + "  " + snapshotFile + "\n") }

// List returns the complete backups in dir, newest first.
func List(dir string) ([]Backup, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Backup
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		b, err := Read(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out, nil
}

// Read reads a backup's manifest. dir is the backup's directory; its
// backup.json stands for it (the file a user finds when looking inside),
// and any other file is refused, saying a directory is wanted.
func Read(dir string) (Backup, error) {
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		if filepath.Base(dir) != manifestFile {
			return Backup{Dir: dir}, fmt.Errorf("%s is a file: a backup is the directory that holds %s", dir, manifestFile)
		}
		dir = filepath.Dir(dir)
	}
	b := Backup{Dir: dir}
	raw, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return b, fmt.Errorf("%s is not a complete mgmtctl backup: %w", dir, err)
	}
	if err := json.Unmarshal(raw, &b.Manifest); err != nil {
		return b, fmt.Errorf("read %s: %w", filepath.Join(dir, manifestFile), err)
	}
	return b, nil
}

// Load reads the snapshot and the token, and refuses a snapshot whose
// sha256 is not the one recorded when it was taken (truncated, corrupt,
// or replaced): nothing is restored from it.
func (b Backup) Load() (snapshot, token []byte, err error) {
	snapshot, err = os.ReadFile(filepath.Join(b.Dir, snapshotFile))
	if err != nil {
		return nil, nil, err
	}
	sum := sha256.Sum256(snapshot)
	got := hex.EncodeToString(sum[:])
	recorded, _ := os.ReadFile(filepath.Join(b.Dir, sumFile))
	if got != b.SHA256 || !strings.HasPrefix(string(recorded), b.SHA256+" ") {
		return nil, nil, fmt.Errorf("snapshot %s is damaged: its sha256 is %s, the backup recorded %s (%d bytes, now %d); refusing to restore it",
			filepath.Join(b.Dir, snapshotFile), got, b.SHA256, b.Size, len(snapshot))
	}
	token, err = os.ReadFile(filepath.Join(b.Dir, tokenFile))
	if err != nil {
		return nil, nil, fmt.Errorf("the backup's server token: %w", err)
	}
	return snapshot, []byte(strings.TrimSpace(string(token))), nil
}

// PinDiff lists the pins that differ between the backup and the config,
// as "name: backup → config".
func PinDiff(backup, config map[string]string) []string {
	keys := map[string]bool{}
	for k := range backup {
		keys[k] = true
	}
	for k := range config {
		keys[k] = true
	}
	var out []string
	for k := range keys {
		if backup[k] != config[k] {
			out = append(out, fmt.Sprintf("%s: %s in the backup, %s in the config", k, orNone(backup[k]), orNone(config[k])))
		}
	}
	sort.Strings(out)
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

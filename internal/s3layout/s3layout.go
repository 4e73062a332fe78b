// Package s3layout is where a cluster's snapshots go in spec.backup.s3's
// bucket: a folder per cluster, and in it one per server, under the
// configured folder; and which cluster a snapshot's folder belongs to.
package s3layout

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// k3s prunes the snapshots in S3 by the prefix <etcd-s3-folder>/<etcd-
// snapshot-name> alone, every object under it counted whichever node or
// cluster uploaded it (k3s-io/k3s pkg/etcd/snapshot.go, Snapshot:
// s3client.SnapshotRetention(ctx, ..., EtcdSnapshotName); pkg/etcd/s3/s3.go,
// SnapshotRetention; k3s-io/k3s #9866). In one folder, three servers with
// a retention of 5 keep 5 in all, and a cluster built later (after a
// disaster, the one apply builds before the restore) prunes the snapshots
// of the one it replaces. So each server uploads to a folder of its own
// under one of its cluster's: <folder>/cluster-<id>/<server>. The
// retention (etcd-s3-retention) is then per server, and nothing a cluster
// does reaches another's snapshots.
//
// The cluster's id is minted from the SSH host key of the VM the cluster
// was initialised on (a new VM has a new key: a rebuilt cluster never
// shares its folder) and kept, once written, in the servers' config.yaml:
// a server replaced later, or a restore, does not move it.

// ClusterPrefix starts the name of a cluster's folder under
// spec.backup.s3.folder.
const ClusterPrefix = "cluster-"

// idPattern is what follows ClusterPrefix: 12 hex digits.
var idPattern = regexp.MustCompile(`^[0-9a-f]{12}$`)

// ClusterID is the id a cluster initialised on a VM with this host key
// (its SSH wire form) takes.
func ClusterID(hostKey []byte) string {
	sum := sha256.Sum256(append([]byte("mgmtctl s3 folder\x00"), hostKey...))
	return hex.EncodeToString(sum[:])[:12]
}

// Folder is the folder the server uploads its snapshots to: its own,
// under its cluster's, under the configured folder.
func Folder(folder, cluster, server string) string {
	return path.Join(folder, ClusterPrefix+cluster, server)
}

// ClusterOf is the cluster id of a snapshot's folder (an object key's
// directory) under the configured folder; "" for the layout before
// per-cluster folders (the configured folder itself) or a key elsewhere.
func ClusterOf(folder, dir string) string {
	rest := dir
	if folder != "" {
		var ok bool
		if rest, ok = strings.CutPrefix(dir, folder+"/"); !ok {
			return ""
		}
	}
	first, _, _ := strings.Cut(rest, "/")
	id, ok := strings.CutPrefix(first, ClusterPrefix)
	if !ok || !idPattern.MatchString(id) {
		return ""
	}
	return id
}

// ClusterInConfig is the cluster id in a server's config.yaml
// (etcd-s3-folder), "" if it holds none under folder.
func ClusterInConfig(folder string, config []byte) string {
	var c struct {
		Folder string `json:"etcd-s3-folder"`
	}
	if yaml.Unmarshal(config, &c) != nil || c.Folder == "" {
		return ""
	}
	return ClusterOf(folder, path.Dir(c.Folder))
}

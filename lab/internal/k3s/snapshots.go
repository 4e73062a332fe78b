package k3s

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Scheduled snapshots, after k3s-io/k3s pkg/etcd/etcd.go (the snapshot
// cron: robfig/cron/v3's standard parser, started with the server when its
// datastore is etcd and --etcd-disable-snapshots is not set) and
// pkg/etcd/snapshot.go, Snapshot (the name <etcd-snapshot-name>-<node>-<unix
// time>, "etcd-snapshot" by default). After each scheduled snapshot k3s
// prunes by the prefix etcd-snapshot-name alone, with no node name in it:
// locally snapshotRetention(EtcdSnapshotRetention, EtcdSnapshotName,
// snapshotDir), in S3 s3client.SnapshotRetention(ctx, ..., EtcdSnapshotName),
// which lists every object under <etcd-s3-folder>/<etcd-snapshot-name>,
// whichever node or cluster uploaded it, and keeps the newest by
// LastModified (pkg/etcd/s3/s3.go, SnapshotRetention; k3s-io/k3s #9866
// says it is meant so). Read at commits 97df5ce (snapshot.go) and 0d0a789
// (s3.go); which v1.35.x tag carries these lines is UNVERIFIED
// (docs/lab.md). The defaults are k3s's (docs.k3s.io
// cli/etcd-snapshot): at 00:00 and 12:00, five kept.
const (
	defaultSnapshotCron      = "0 */12 * * *"
	defaultSnapshotRetention = 5
	scheduledSnapshotName    = "etcd-snapshot"
)

// scheduleSnapshots starts the server's snapshot cron until ctx ends.
func scheduleSnapshots(ctx context.Context, spec string, retention int, s3 S3Config, node string, log io.Writer) error {
	if spec == "" {
		spec = defaultSnapshotCron
	}
	if retention <= 0 {
		retention = defaultSnapshotRetention
	}
	c := cron.New()
	if _, err := c.AddFunc(spec, func() {
		file, err := scheduledSnapshot(snapshotDir, node, retention, time.Now(), log)
		if err != nil {
			logf(log, "Failed to take scheduled snapshot: %v", err)
			return
		}
		if s3.Enabled {
			// k3s uploads each scheduled snapshot and applies the S3
			// retention to every object named with etcd-snapshot-name
			// under the folder.
			if err := uploadSnapshot(ctx, s3, file, scheduledSnapshotName, log); err != nil {
				logf(log, "Failed to upload scheduled snapshot to S3: %v", err)
			}
		}
	}); err != nil {
		return fmt.Errorf("failed to schedule etcd snapshots: %w", err)
	}
	c.Start()
	go func() {
		<-ctx.Done()
		c.Stop()
	}()
	return nil
}

// scheduledSnapshot saves one scheduled snapshot into dir and prunes the
// snapshots in dir named with etcd-snapshot-name to retention, the oldest
// first; it returns the snapshot's file.
func scheduledSnapshot(dir, node string, retention int, now time.Time, log io.Writer) (string, error) {
	name := fmt.Sprintf("%s-%s-%d", scheduledSnapshotName, node, now.Unix())
	file := filepath.Join(dir, name)
	if err := saveSnapshot(file); err != nil {
		return "", err
	}
	logf(log, "Snapshot %s saved.", name)
	return file, pruneSnapshots(dir, scheduledSnapshotName, retention, log)
}

// uploadSnapshot uploads a saved snapshot to S3 and, with a prefix,
// applies the retention to the snapshots in S3 named with it.
func uploadSnapshot(ctx context.Context, cfg S3Config, file, prefix string, log io.Writer) error {
	c, err := newS3Client(ctx, cfg, log)
	if err != nil {
		return err
	}
	if err := c.upload(ctx, file); err != nil {
		return err
	}
	logf(log, "S3 upload complete for %s", filepath.Base(file))
	if prefix == "" {
		return nil
	}
	return c.prune(ctx, prefix, cfg.Retention)
}

// pruneSnapshots deletes, beyond retention, the oldest snapshots in dir
// whose name starts with prefix, as k3s's snapshotRetention does
// (pkg/etcd/snapshot.go): the time from the name's last field (else the
// file's), newest kept, whatever node the name holds. A snapshot still
// being written (.part, the lab's own) is left alone.
func pruneSnapshots(dir, prefix string, retention int, log io.Writer) error {
	if retention < 1 {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	type file struct {
		name string
		at   int64
	}
	var files []file
	for _, e := range entries {
		if e.IsDir() || !strings.HasPrefix(e.Name(), prefix) || strings.HasSuffix(e.Name(), ".part") {
			continue
		}
		base := strings.TrimSuffix(e.Name(), ".zip")
		at, err := strconv.ParseInt(base[strings.LastIndexByte(base, '-')+1:], 10, 64)
		if err != nil {
			fi, err := e.Info()
			if err != nil {
				continue
			}
			at = fi.ModTime().Unix()
		}
		files = append(files, file{e.Name(), at})
	}
	sort.SliceStable(files, func(i, j int) bool { return files[i].at > files[j].at })
	for len(files) > retention {
		old := files[len(files)-1]
		if err := os.Remove(filepath.Join(dir, old.name)); err != nil {
			return err
		}
		logf(log, "Removing local snapshot %s", filepath.Join(dir, old.name))
		files = files[:len(files)-1]
	}
	return nil
}

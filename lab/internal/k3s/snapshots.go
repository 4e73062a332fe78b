package k3s

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Scheduled snapshots, after k3s-io/k3s v1.35.7+k3s1 pkg/etcd/etcd.go (the
// snapshot cron: robfig/cron/v3's standard parser, started with the
// server when its datastore is etcd and --etcd-disable-snapshots is not
// set) and pkg/etcd/snapshot.go (the name <etcd-snapshot-name>-<node>-<unix
// time>, "etcd-snapshot" by default; after each scheduled snapshot, the
// oldest of this node's scheduled snapshots beyond the retention are
// deleted). The defaults are k3s's (docs.k3s.io cli/etcd-snapshot): at
// 00:00 and 12:00, five kept.
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
			// k3s uploads each scheduled snapshot and applies the
			// retention to this node's scheduled snapshots in S3 too.
			if err := uploadSnapshot(ctx, s3, file, scheduledSnapshotName+"-"+node+"-", log); err != nil {
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

// scheduledSnapshot saves one scheduled snapshot into dir and prunes this
// node's scheduled snapshots to retention, the oldest first; it returns
// the snapshot's file.
func scheduledSnapshot(dir, node string, retention int, now time.Time, log io.Writer) (string, error) {
	name := fmt.Sprintf("%s-%s-%d", scheduledSnapshotName, node, now.Unix())
	file := filepath.Join(dir, name)
	if err := saveSnapshot(file); err != nil {
		return "", err
	}
	logf(log, "Snapshot %s saved.", name)
	return file, pruneSnapshots(dir, scheduledSnapshotName+"-"+node+"-", retention, log)
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

// pruneSnapshots deletes the oldest snapshots named with prefix beyond
// retention (their names end in their unix time: same length, so names
// sort by age).
func pruneSnapshots(dir, prefix string, retention int, log io.Writer) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasPrefix(e.Name(), prefix) && !strings.HasSuffix(e.Name(), ".part") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for len(names) > retention {
		if err := os.Remove(filepath.Join(dir, names[0])); err != nil {
			return err
		}
		logf(log, "Removing local snapshot %s", filepath.Join(dir, names[0]))
		names = names[1:]
	}
	return nil
}

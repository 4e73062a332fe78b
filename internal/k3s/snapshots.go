package k3s

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/remote"
)

// scheduledPrefix names k3s's scheduled snapshots (etcd-snapshot-name's
// default; k3s pkg/etcd/snapshot.go), as against on-demand ones.
const scheduledPrefix = "etcd-snapshot-"

// ReadSnapshots reads a server's snapshots (k3s etcd-snapshot ls) and
// when its k3s last started.
func ReadSnapshots(ctx context.Context, h remote.Reader) (ls string, started time.Time, err error) {
	res, err := remote.Batch(ctx, h, true, remote.EtcdSnapshots().AsRoot(), remote.ServiceStartedAt("k3s").AsRoot())
	if err != nil {
		return "", time.Time{}, err
	}
	if res[0].ExitCode != 0 {
		return "", time.Time{}, fmt.Errorf("k3s etcd-snapshot ls exited %d: %s", res[0].ExitCode, strings.TrimSpace(string(res[0].Stderr)))
	}
	started, _ = time.Parse(systemdTime, strings.TrimSpace(string(res[1].Stdout)))
	return string(res[0].Stdout), started, nil
}

// SnapshotsFresh judges `k3s etcd-snapshot ls`'s output: the newest
// scheduled snapshot must be younger than twice the schedule's longest
// interval; with none, k3s must have run for less than that (its first is
// still due). It says what it found either way. Times are the server's
// and the laptop's: a clock skewed by more than the schedule shows here.
func SnapshotsFresh(ls, schedule string, started, now time.Time) (bool, string) {
	interval, err := config.SnapshotInterval(schedule, now)
	if err != nil {
		return false, fmt.Sprintf("spec.backup.schedule %q: %v", schedule, err)
	}
	var newest time.Time
	var name string
	n := 0
	for _, line := range strings.Split(ls, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], scheduledPrefix) {
			continue
		}
		t, err := time.Parse(time.RFC3339, f[3])
		if err != nil {
			continue
		}
		n++
		if t.After(newest) {
			newest, name = t, f[0]
		}
	}
	limit := 2 * interval
	if n == 0 {
		if !started.IsZero() && now.Sub(started) < limit {
			return true, fmt.Sprintf("no scheduled snapshot yet: k3s started %s ago, the first is due within %s (schedule %q)", round(now.Sub(started)), interval, schedule)
		}
		return false, fmt.Sprintf("no scheduled snapshot, with schedule %q (every %s at most)", schedule, interval)
	}
	age := now.Sub(newest)
	if age > limit {
		return false, fmt.Sprintf("the newest scheduled snapshot, %s, is %s old: more than twice the schedule's interval (%q: every %s at most)", name, round(age), schedule, interval)
	}
	return true, fmt.Sprintf("%d scheduled snapshot(s), the newest %s, %s old (schedule %q)", n, name, round(age), schedule)
}

func round(d time.Duration) string {
	if d < time.Minute {
		return d.Round(time.Second).String()
	}
	return fmt.Sprint(d.Round(time.Minute))
}

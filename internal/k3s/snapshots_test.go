package k3s

import (
	"strings"
	"testing"
	"time"
)

// TestSnapshotsFresh: the newest scheduled snapshot (on-demand ones do
// not count) against twice the schedule's interval, and none yet while
// k3s has run for less than that.
func TestSnapshotsFresh(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 30, 0, 0, time.UTC)
	ls := func(lines ...string) string {
		return "Name Location Size Created\n" + strings.Join(lines, "\n") + "\n"
	}
	snap := func(name string, at time.Time) string {
		return name + " file:///var/lib/rancher/k3s/server/db/snapshots/" + name + " 24195104 " + at.Format(time.RFC3339)
	}
	for _, tc := range []struct {
		name, ls, schedule string
		started            time.Time
		ok                 bool
		detail             string
	}{
		{"fresh", ls(snap("etcd-snapshot-s1-1", now.Add(-50*time.Minute)), snap("etcd-snapshot-s1-0", now.Add(-110*time.Minute))), "0 * * * *", now.Add(-5 * time.Hour), true, "2 scheduled snapshot(s), the newest etcd-snapshot-s1-1, 50m0s old"},
		{"stale", ls(snap("etcd-snapshot-s1-1", now.Add(-3*time.Hour))), "0 * * * *", now.Add(-5 * time.Hour), false, "is 3h0m0s old: more than twice the schedule's interval (\"0 * * * *\": every 1h0m0s at most)"},
		{"on-demand only", ls(snap("on-demand-s1-1", now.Add(-time.Minute))), "0 * * * *", now.Add(-5 * time.Hour), false, "no scheduled snapshot"},
		{"none yet", ls(), "0 */12 * * *", now.Add(-3 * time.Hour), true, "no scheduled snapshot yet: k3s started 3h0m0s ago, the first is due within 12h0m0s"},
		{"uneven schedule", ls(snap("etcd-snapshot-s1-1", now.Add(-30*time.Hour))), "0 6 * * 1-5", now.Add(-100 * time.Hour), true, "30h0m0s old"},
	} {
		ok, detail := SnapshotsFresh(tc.ls, tc.schedule, tc.started, now)
		if ok != tc.ok || !strings.Contains(detail, tc.detail) {
			t.Errorf("%s: %v %q", tc.name, ok, detail)
		}
	}
}

package config

import (
	"time"

	"github.com/robfig/cron/v3"
)

// ParseSchedule reads spec.backup.schedule as k3s reads
// etcd-snapshot-schedule-cron: robfig/cron/v3's standard parser (five
// fields, or a descriptor such as @hourly), which k3s's snapshot cron
// uses (k3s pkg/etcd/etcd.go, cron.AddFunc).
func ParseSchedule(s string) (cron.Schedule, error) { return cron.ParseStandard(s) }

// DefaultSnapshotSchedule is k3s's own etcd-snapshot-schedule-cron.
const DefaultSnapshotSchedule = "0 */12 * * *"

// SnapshotInterval is the longest gap between two runs of schedule after
// from, over the next runs: how old the newest scheduled snapshot may be.
func SnapshotInterval(schedule string, from time.Time) (time.Duration, error) {
	sch, err := ParseSchedule(schedule)
	if err != nil {
		return 0, err
	}
	var longest time.Duration
	t := sch.Next(from)
	for range 16 {
		n := sch.Next(t)
		longest = max(longest, n.Sub(t))
		t = n
	}
	return longest, nil
}

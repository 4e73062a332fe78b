package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkConverged measures what a user waits for on a converged
// management cluster: a full `mgmtctl apply` that changes nothing, and
// `mgmtctl status`, each a real process in the lab's laptop namespace
// (SSH to the node and the VM, the Kubernetes API through the VM), then
// the same in api access (api/apply, api/status).
func BenchmarkConverged(b *testing.B) {
	e := startBench(b)
	if r := e.apply(); r.Code != 0 {
		b.Fatalf("first apply: %s\n%s", r.Stdout, r.Stderr)
	}
	benchReruns(b, e)
	// A backup of the converged cluster: snapshot, copy to the laptop,
	// prune (keeping 2, so the loop's backups do not pile up).
	b.Run("backup", func(b *testing.B) {
		for b.Loop() {
			if r := e.mgmtctl("backup", "--keep", "2"); r.Code != 0 {
				b.Fatalf("backup: %s\n%s", r.Stdout, r.Stderr)
			}
		}
	})
	// The same re-runs in api access (spec.proxmox.access: api): the
	// node's facts through the Proxmox API with mgmtctl's token, beside
	// the SSH figures above. One apply first puts the image into the
	// storage's import content.
	if err := e.UseAPI(e.bin); err != nil {
		b.Fatal(err)
	}
	if r := e.apply(); r.Code != 0 {
		b.Fatalf("first apply in api access: %s\n%s", r.Stdout, r.Stderr)
	}
	b.Run("api", func(b *testing.B) { benchReruns(b, e) })
}

// BenchmarkHA measures three servers on a three-node Proxmox cluster: the
// fresh apply that builds them (one sample, reported as fresh-apply-s: a
// lab per iteration would take minutes each), then converged re-runs of
// apply and status, which check every server and its etcd member.
func BenchmarkHA(b *testing.B) {
	e := startHA(b)
	start := time.Now()
	if r := e.apply(); r.Code != 0 {
		b.Fatalf("first apply: %s\n%s", r.Stdout, r.Stderr)
	}
	fresh := time.Since(start)
	b.Run("fresh", func(b *testing.B) {
		for b.Loop() {
		}
		b.ReportMetric(fresh.Seconds(), "fresh-apply-s")
	})
	benchReruns(b, e)
}

// benchReruns measures a converged apply (changed=0) and status (the
// seed's verification list), each also as the median of its runs: one
// slow run (the machine busy) moves the mean, not the median.
func benchReruns(b *testing.B, e *env) {
	b.Run("apply", func(b *testing.B) {
		timed(b, func() {
			if r := e.apply(); r.Code != 0 || !strings.Contains(r.Stdout, "changed=0") {
				b.Fatalf("apply: %s\n%s", r.Stdout, r.Stderr)
			}
		})
	})
	b.Run("status", func(b *testing.B) {
		timed(b, func() {
			if r := e.mgmtctl("status"); r.Code != 0 {
				b.Fatalf("status: %s\n%s", r.Stdout, r.Stderr)
			}
		})
	})
}

// timed runs f once per iteration and reports the median run as
// median-ms beside the benchmark's mean.
func timed(b *testing.B, f func()) {
	var runs []time.Duration
	for b.Loop() {
		start := time.Now()
		f()
		runs = append(runs, time.Since(start))
	}
	slices.Sort(runs)
	if n := len(runs); n > 0 {
		median := runs[n/2]
		if n%2 == 0 {
			median = (runs[n/2-1] + runs[n/2]) / 2
		}
		b.ReportMetric(float64(median.Microseconds())/1000, "median-ms")
	}
}

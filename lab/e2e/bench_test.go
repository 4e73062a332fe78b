package e2e

import (
	"os"
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
// slow run (the machine busy) moves the mean, not the median. With
// MGMTCTL_BENCH_BASELINE naming another mgmtctl binary (an earlier
// build: make bench BASELINE=path), each run of it alternates with one
// of this build's, and its median is reported beside as baseline-ms:
// both measured in the same run, on the same lab, under the same load.
func benchReruns(b *testing.B, e *env) {
	base := os.Getenv("MGMTCTL_BENCH_BASELINE")
	b.Run("apply", func(b *testing.B) {
		timed(b, base, func(bin string) {
			if r := e.Run("", bin, "apply", "-c", e.ConfigPath()); r.Code != 0 || !strings.Contains(r.Stdout, "changed=0") {
				b.Fatalf("apply (%s): %s\n%s", bin, r.Stdout, r.Stderr)
			}
		}, e.bin)
	})
	b.Run("status", func(b *testing.B) {
		timed(b, base, func(bin string) {
			if r := e.Run("", bin, "status", "-c", e.ConfigPath()); r.Code != 0 {
				b.Fatalf("status (%s): %s\n%s", bin, r.Stdout, r.Stderr)
			}
		}, e.bin)
	})
}

// timed runs f with bin once per iteration (and with base before it,
// when set, outside the benchmark's clock) and reports the medians as
// median-ms and baseline-ms beside the benchmark's mean.
func timed(b *testing.B, base string, f func(bin string), bin string) {
	var runs, baseRuns []time.Duration
	for b.Loop() {
		if base != "" {
			b.StopTimer()
			start := time.Now()
			f(base)
			baseRuns = append(baseRuns, time.Since(start))
			b.StartTimer()
		}
		start := time.Now()
		f(bin)
		runs = append(runs, time.Since(start))
	}
	b.ReportMetric(median(runs), "median-ms")
	if base != "" {
		b.ReportMetric(median(baseRuns), "baseline-ms")
	}
}

// median is the median of runs in milliseconds.
func median(runs []time.Duration) float64 {
	if len(runs) == 0 {
		return 0
	}
	s := slices.Clone(runs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return float64(m.Microseconds()) / 1000
}

package ui

import (
	"bytes"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/engine"
)

func TestTimings(t *testing.T) {
	var b bytes.Buffer
	tm := NewTimings(&b)
	tm.Preflight, tm.Top = 12*time.Millisecond, 2
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, e := range []engine.Event{
		{Kind: engine.RunStart, Time: at(0)},
		{Kind: engine.PhaseStart, Time: at(0), Phase: "vm"},
		{Kind: engine.StepEnd, Time: at(100), Phase: "vm", Step: "gather-facts", Host: "pve", Duration: 100 * time.Millisecond},
		{Kind: engine.StepEnd, Time: at(110), Phase: "vm", Step: "image", Host: "pve", Duration: 10 * time.Millisecond},
		{Kind: engine.PhaseStart, Time: at(120), Phase: "k3s"},
		{Kind: engine.StepEnd, Time: at(170), Phase: "k3s", Step: "gather-facts", Host: "lab-mgmt", Duration: 50 * time.Millisecond},
		{Kind: engine.RunEnd, Time: at(180)},
	} {
		tm.Event(e)
	}
	want := `
TIMINGS ***********************************************************
preflight              12 ms
phase vm              120 ms
phase k3s              60 ms
the phases in all     180 ms
steps by host:
  lab-mgmt      50 ms
  pve          110 ms
slowest steps:
  vm/gather-facts [pve]           100 ms
  k3s/gather-facts [lab-mgmt]      50 ms
`
	if b.String() != want {
		t.Errorf("got:\n%q\nwant:\n%q", b.String(), want)
	}
}

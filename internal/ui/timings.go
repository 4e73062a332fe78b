package ui

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/engine"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Timings is apply --timings: where a run's time went, written after its
// recap: the preflight, each phase's wall time, each host's share of the
// steps, and the slowest steps. The JSON events carry the same per step
// (duration_ms).
type Timings struct {
	w io.Writer
	// Preflight is how long the checks before the first change took.
	Preflight time.Duration
	// Top is how many of the slowest steps are listed (10 when 0).
	Top int

	start      time.Time
	phaseStart map[step.Tag]time.Time
	phases     []step.Tag
	phaseWall  map[step.Tag]time.Duration
	last       time.Time
	steps      []timedStep
}

type timedStep struct {
	phase    step.Tag
	id, host string
	took     time.Duration
}

// NewTimings writes to w.
func NewTimings(w io.Writer) *Timings {
	return &Timings{w: w, phaseStart: map[step.Tag]time.Time{}, phaseWall: map[step.Tag]time.Duration{}}
}

// Event implements engine.Listener.
func (t *Timings) Event(e engine.Event) {
	switch e.Kind {
	case engine.RunStart:
		t.start, t.last = e.Time, e.Time
	case engine.PhaseStart:
		t.endPhase(e.Time)
		t.phases = append(t.phases, e.Phase)
		t.phaseStart[e.Phase] = e.Time
	case engine.StepEnd:
		t.steps = append(t.steps, timedStep{e.Phase, e.Step, e.Host, e.Duration})
		t.last = e.Time
	case engine.RunEnd:
		t.endPhase(e.Time)
		t.write(e.Time)
	}
}

func (t *Timings) endPhase(at time.Time) {
	if n := len(t.phases); n > 0 {
		p := t.phases[n-1]
		if _, done := t.phaseWall[p]; !done {
			t.phaseWall[p] = at.Sub(t.phaseStart[p])
		}
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%6d ms", d.Milliseconds()) }

func (t *Timings) write(end time.Time) {
	fmt.Fprintf(t.w, "\nTIMINGS ***********************************************************\n")
	tw := tabwriter.NewWriter(t.w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "preflight\t%s\n", ms(t.Preflight))
	for _, p := range t.phases {
		fmt.Fprintf(tw, "phase %s\t%s\n", p, ms(t.phaseWall[p]))
	}
	fmt.Fprintf(tw, "the phases in all\t%s\n", ms(end.Sub(t.start)))
	_ = tw.Flush()
	byHost := map[string]time.Duration{}
	var hosts []string
	for _, s := range t.steps {
		if _, ok := byHost[s.host]; !ok {
			hosts = append(hosts, s.host)
		}
		byHost[s.host] += s.took
	}
	sort.Strings(hosts)
	fmt.Fprintf(t.w, "steps by host:\n")
	tw = tabwriter.NewWriter(t.w, 0, 4, 2, ' ', 0)
	for _, h := range hosts {
		fmt.Fprintf(tw, "  %s\t%s\n", h, ms(byHost[h]))
	}
	_ = tw.Flush()
	top := t.Top
	if top == 0 {
		top = 10
	}
	slow := append([]timedStep(nil), t.steps...)
	sort.SliceStable(slow, func(i, j int) bool { return slow[i].took > slow[j].took })
	if len(slow) > top {
		slow = slow[:top]
	}
	fmt.Fprintf(t.w, "slowest steps:\n")
	tw = tabwriter.NewWriter(t.w, 0, 4, 2, ' ', 0)
	for _, s := range slow {
		fmt.Fprintf(tw, "  %s/%s [%s]\t%s\n", s.phase, s.id, s.host, ms(s.took))
	}
	_ = tw.Flush()
}

var _ engine.Listener = (*Timings)(nil)

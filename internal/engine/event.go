package engine

import (
	"time"

	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Kind is the type of an event.
type Kind int

// Event kinds, in the order a run emits them.
const (
	RunStart Kind = iota
	PhaseStart
	StepStart
	StepProgress
	StepEnd
	RunEnd
)

var kindNames = [...]string{RunStart: "start", PhaseStart: "phase", StepStart: "step-start", StepProgress: "progress", StepEnd: "step", RunEnd: "recap"}

func (k Kind) String() string { return kindNames[k] }

// Event is what the engine tells its listeners. Fields not meaningful for
// a kind are zero.
type Event struct {
	Kind  Kind
	Time  time.Time
	Check bool // the run is in check mode: changes are pending, not made
	Phase step.Tag
	// Phases lists the selected phases (RunStart).
	Phases   []step.Tag
	Step     string // step ID, or "gather-facts"
	Host     string
	Outcome  step.Outcome
	Changes  []step.Change
	Warnings []string
	Note     string
	Message  string // progress text (StepProgress)
	Err      error
	Duration time.Duration
	Recap    *Recap // RunEnd
	// Interrupted is set on RunEnd when the run stopped on a signal.
	Interrupted bool
}

// Listener receives events in order, from one goroutine at a time.
type Listener interface {
	Event(Event)
}

// Listeners fans events out to several listeners, in order.
type Listeners []Listener

// Event implements Listener.
func (ls Listeners) Event(e Event) {
	for _, l := range ls {
		l.Event(e)
	}
}

var _ Listener = Listeners(nil)

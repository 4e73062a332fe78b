package ui

import (
	"encoding/json"
	"io"
	"sync"

	"github.com/mgmtctl/mgmtctl/internal/engine"
	"github.com/mgmtctl/mgmtctl/internal/redact"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// JSON is the machine view: one JSON object per line per event; the last
// one is {"event":"recap",...}.
type JSON struct {
	mu   sync.Mutex
	enc  *json.Encoder
	x    *redact.Redactor
	diff bool
}

// NewJSON returns a JSON view writing to w. Diffs are included with diff.
func NewJSON(w io.Writer, x *redact.Redactor, diff bool) *JSON {
	return &JSON{enc: json.NewEncoder(x.Writer(w)), x: x, diff: diff}
}

var _ engine.Listener = (*JSON)(nil)

type jsonChange struct {
	Target  string      `json:"target"`
	Action  step.Action `json:"action"`
	Summary string      `json:"summary"`
	Diff    *step.Diff  `json:"diff,omitempty"`
	// Effects are what carrying the change out does, with the diff.
	Effects []string `json:"effects,omitempty"`
}

type jsonEvent struct {
	Event      string        `json:"event"`
	Time       string        `json:"time"`
	Check      bool          `json:"check,omitempty"`
	Phases     []step.Tag    `json:"phases,omitempty"`
	Phase      step.Tag      `json:"phase,omitempty"`
	Step       string        `json:"step,omitempty"`
	Host       string        `json:"host,omitempty"`
	Outcome    *step.Outcome `json:"outcome,omitempty"`
	Changes    []jsonChange  `json:"changes,omitempty"`
	Warnings   []string      `json:"warnings,omitempty"`
	Note       string        `json:"note,omitempty"`
	Message    string        `json:"message,omitempty"`
	Error      string        `json:"error,omitempty"`
	DurationMS *int64        `json:"duration_ms,omitempty"`
}

type jsonRecap struct {
	Event       string                    `json:"event"`
	Time        string                    `json:"time"`
	Check       bool                      `json:"check"`
	OK          int                       `json:"ok"`
	Changed     int                       `json:"changed"`
	Failed      int                       `json:"failed"`
	Skipped     int                       `json:"skipped"`
	Hosts       map[string]*engine.Counts `json:"hosts"`
	Interrupted bool                      `json:"interrupted,omitempty"`
}

// Event implements engine.Listener.
func (j *JSON) Event(e engine.Event) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.x.String
	out := jsonEvent{Event: e.Kind.String(), Time: e.Time.UTC().Format("2006-01-02T15:04:05.000Z"), Check: e.Check,
		Phases: e.Phases, Phase: e.Phase, Step: e.Step, Host: e.Host,
		Note: s(e.Note), Message: s(e.Message)}
	switch e.Kind {
	case engine.StepEnd:
		o := e.Outcome
		out.Outcome = &o
		d := e.Duration.Milliseconds()
		out.DurationMS = &d
		for _, w := range e.Warnings {
			out.Warnings = append(out.Warnings, s(w))
		}
		for _, c := range e.Changes {
			jc := jsonChange{Target: s(c.Target), Action: c.Action, Summary: s(c.Summary)}
			if j.diff && c.Diff != nil {
				jc.Diff = &step.Diff{Path: c.Diff.Path, Before: s(c.Diff.Before), After: s(c.Diff.After)}
			}
			if j.diff {
				for _, ef := range c.Effects {
					jc.Effects = append(jc.Effects, s(ef.String()))
				}
			}
			out.Changes = append(out.Changes, jc)
		}
		if e.Err != nil {
			out.Error = s(e.Err.Error())
		}
	case engine.RunEnd:
		t := e.Recap.Total
		_ = j.enc.Encode(jsonRecap{Event: out.Event, Time: out.Time, Check: e.Check,
			OK: t.OK, Changed: t.Changed, Failed: t.Failed, Skipped: t.Skipped,
			Hosts: e.Recap.Hosts, Interrupted: e.Interrupted})
		return
	}
	_ = j.enc.Encode(out)
}

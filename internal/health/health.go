// Package health is `mgmtctl status`: the phases' own steps looked at the
// way a check run looks at them (each step's Check, and one Observe of a
// Waiter), so status decides nothing that convergence does not, plus the
// few observations only status makes (a laptop's kubeconfig reaches its
// server), reported as a table or JSON. A line that follows from one named
// before it is skipped, so a cause is named once.
package health

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/mgmtctl/mgmtctl/internal/engine"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// State is how a check ended.
type State int

// States, as the report shows them.
const (
	OK State = iota
	Unhealthy
	Skipped
)

var stateNames = [...]string{OK: "ok", Unhealthy: "UNHEALTHY", Skipped: "skipped"}

func (s State) String() string { return stateNames[s] }

// MarshalText renders states by name in JSON.
func (s State) MarshalText() ([]byte, error) { return []byte(strings.ToLower(s.String())), nil }

// Finding is what one check found.
type Finding struct {
	OK     bool
	Detail string
	// Next says what to run or read when not OK.
	Next string
}

// Good and Bad build findings.
func Good(format string, args ...any) Finding {
	return Finding{OK: true, Detail: fmt.Sprintf(format, args...)}
}

// Bad is an unhealthy finding with the next thing to do.
func Bad(next, format string, args ...any) Finding {
	return Finding{Detail: fmt.Sprintf(format, args...), Next: next}
}

// Check is an observation only status makes, after its phase's steps are
// all as configured.
type Check struct {
	Name string
	Run  func(ctx context.Context) Finding
	// Always runs the check even when its phase is blocked or not as
	// configured: the state of a cluster of servers with one down (which
	// members are healthy, who holds the VIP) is what status is for.
	Always bool
}

// Line is one check's result in the report.
type Line struct {
	Phase step.Tag `json:"phase"`
	Check string   `json:"check"`
	// Host is the machine the check looked at, when its phase looks at
	// several (the servers of a cluster, their Proxmox nodes).
	Host   string `json:"host,omitempty"`
	State  State  `json:"state"`
	Detail string `json:"detail"`
	Next   string `json:"next,omitempty"`
}

// Report is every check's result.
type Report struct {
	Healthy bool   `json:"healthy"`
	Lines   []Line `json:"checks"`
	// Failure is the first step's error, for the CLI to class (an
	// unreachable host or a refused key exits as apply's does).
	Failure error `json:"-"`
}

// configured leaves out the steps that belong to a run only when its
// facts say so (step.Conditional: the backup apply takes before a risky
// change): they are how apply goes about a change, not something that is
// or is not as configured. plan shows them.
func configured(steps []step.Step) []step.Step {
	out := make([]step.Step, 0, len(steps))
	for _, s := range steps {
		if _, ok := s.(step.Conditional); !ok {
			out = append(out, s)
		}
	}
	return out
}

// Run looks at the phases in order: a check run of each (no Executor, so
// nothing is carried out: the session's business), one line per step, then the phase's extra checks when all its
// steps are as configured. A step with changes pending is "not as
// configured" and says which apply to run; a wait pending after that cause
// in the same phase, and every phase after it, is skipped, naming it.
func Run(ctx context.Context, phases []step.Phase, extra map[step.Tag][]Check) Report {
	r := Report{Healthy: true}
	blocked := ""
	for _, p := range phases {
		p.Steps = configured(p.Steps)
		multi := multiHost(p.Steps)
		if blocked != "" {
			for _, s := range p.Steps {
				l := Line{Phase: p.Tag, Check: s.ID(), State: Skipped, Detail: "needs " + blocked}
				if multi {
					l.Host = s.Host()
				}
				r.Lines = append(r.Lines, l)
			}
			r.always(ctx, p.Tag, extra[p.Tag])
			continue
		}
		var ends ends
		_, _ = engine.Run(ctx, []step.Phase{p}, engine.Options{Check: true}, &ends)
		cause := ""
		for _, e := range ends {
			if e.Err != nil && r.Failure == nil {
				r.Failure = e.Err
			}
			l := lineOf(e)
			if multi && e.Step != "gather-facts" {
				l.Host = e.Host
			}
			if l.State == Unhealthy && cause != "" && onlyWaits(e.Changes) {
				l.State, l.Detail, l.Next = Skipped, "needs "+cause, ""
			}
			if l.State == Unhealthy && cause == "" {
				cause = string(p.Tag) + "/" + l.name()
			}
			r.Lines = append(r.Lines, l)
		}
		if cause != "" {
			r.always(ctx, p.Tag, extra[p.Tag])
		} else {
			for _, c := range extra[p.Tag] {
				f := c.Run(ctx)
				l := Line{Phase: p.Tag, Check: c.Name, Detail: f.Detail, Next: f.Next}
				if !f.OK {
					l.State = Unhealthy
					cause = string(p.Tag) + "/" + c.Name
				}
				r.Lines = append(r.Lines, l)
			}
		}
		if cause != "" {
			blocked, r.Healthy = cause, false
		}
	}
	return r
}

// always runs a blocked or unhealthy phase's Always checks.
func (r *Report) always(ctx context.Context, tag step.Tag, checks []Check) {
	for _, c := range checks {
		if !c.Always {
			continue
		}
		f := c.Run(ctx)
		l := Line{Phase: tag, Check: c.Name, Detail: f.Detail, Next: f.Next}
		if !f.OK {
			l.State, r.Healthy = Unhealthy, false
		}
		r.Lines = append(r.Lines, l)
	}
}

// multiHost says a phase runs its steps on several machines (the servers
// of a cluster, their Proxmox nodes): a step ID appears more than once,
// and only the host tells the lines apart.
func multiHost(steps []step.Step) bool {
	seen := map[string]bool{}
	for _, s := range steps {
		if seen[s.ID()] {
			return true
		}
		seen[s.ID()] = true
	}
	return false
}

// name is the check as the verdict names it: with its host when there is
// one.
func (l Line) name() string {
	if l.Host != "" {
		return l.Check + " on " + l.Host
	}
	return l.Check
}

// ends collects the step-end events of a check run.
type ends []engine.Event

func (e *ends) Event(ev engine.Event) {
	if ev.Kind == engine.StepEnd {
		*e = append(*e, ev)
	}
}

func lineOf(e engine.Event) Line {
	l := Line{Phase: e.Phase, Check: e.Step, Detail: e.Note}
	apply := "mgmtctl apply --tags " + string(e.Phase)
	switch {
	case e.Outcome == step.Failed:
		l.State, l.Next = Unhealthy, "fix the cause, then "+apply+"; docs/troubleshooting.md"
		if e.Err != nil {
			l.Detail = strings.TrimPrefix(e.Err.Error(), "check: ")
		}
	case e.Outcome == step.Changed:
		parts := make([]string, len(e.Changes))
		for i, c := range e.Changes {
			parts[i] = c.Summary
		}
		l.State, l.Detail, l.Next = Unhealthy, strings.Join(parts, "; "), apply
		if !onlyWaits(e.Changes) {
			l.Detail = "not as configured: " + l.Detail
		}
	case e.Outcome == step.Skipped:
		l.State = Skipped
	case len(e.Warnings) > 0:
		l.State, l.Detail = Unhealthy, strings.Join(e.Warnings, "; ")
		l.Next = "mgmtctl leaves this alone: change it by hand, or mgmt.yaml"
	}
	if l.Detail == "" && e.Step == "gather-facts" {
		l.Detail = "facts gathered"
		if e.Host != "" && e.Host != "laptop" {
			l.Detail = e.Host + " reached; facts gathered"
		}
	}
	return l
}

// onlyWaits says the changes are states still to be waited for.
func onlyWaits(cs []step.Change) bool {
	for _, c := range cs {
		if c.Action != step.Wait {
			return false
		}
	}
	return len(cs) > 0
}

// Unhealthy lists the checks that failed, as phase/check.
func (r Report) Unhealthy() []string {
	var out []string
	for _, l := range r.Lines {
		if l.State == Unhealthy {
			out = append(out, string(l.Phase)+"/"+l.name())
		}
	}
	return out
}

// Masker masks secret values in text.
type Masker interface{ String(string) string }

// WriteText renders the report as a table, each unhealthy line followed by
// what to do next, then a one-line verdict.
func WriteText(w io.Writer, r Report, m Masker) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	hosts := false
	for _, l := range r.Lines {
		hosts = hosts || l.Host != ""
	}
	if hosts {
		// A cluster of servers: which one each line is about.
		fmt.Fprintln(tw, "PHASE\tCHECK\tHOST\tSTATUS\tDETAIL")
	} else {
		fmt.Fprintln(tw, "PHASE\tCHECK\tSTATUS\tDETAIL")
	}
	for _, l := range r.Lines {
		if hosts {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.Phase, l.Check, l.Host, l.State, m.String(l.Detail))
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", l.Phase, l.Check, l.State, m.String(l.Detail))
		}
		if l.Next != "" {
			fmt.Fprintf(tw, "\t\t\t%snext: %s\n", map[bool]string{true: "\t"}[hosts], m.String(l.Next))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Healthy {
		_, err := fmt.Fprintf(w, "healthy: %d checks ok, and as configured\n", len(r.Lines))
		return err
	}
	_, err := fmt.Fprintf(w, "unhealthy: %s\n", strings.Join(r.Unhealthy(), ", "))
	return err
}

// WriteJSON renders the report as one JSON object.
func WriteJSON(w io.Writer, r Report, m Masker) error {
	for i := range r.Lines {
		r.Lines[i].Detail, r.Lines[i].Next = m.String(r.Lines[i].Detail), m.String(r.Lines[i].Next)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

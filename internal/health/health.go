// Package health is `mgmtctl status`: a list of read-only checks, one
// question each ("is the VM running?", "is the proxmox provider Ready at
// its pin?"), run in phase order, and their report as a table or JSON. A
// check whose prerequisite failed is skipped, so one cause is named once.
package health

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

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

// Check is one question.
type Check struct {
	Phase step.Tag
	Name  string
	// Needs names earlier checks that must be OK for this one to mean
	// anything; when one ran and was not, this one is skipped, so a cause
	// is named once. A needed check outside the selected phases is not
	// waited for.
	Needs []string
	Run   func(ctx context.Context) Finding
}

// Line is one check's result in the report.
type Line struct {
	Phase  step.Tag `json:"phase"`
	Check  string   `json:"check"`
	State  State    `json:"state"`
	Detail string   `json:"detail"`
	Next   string   `json:"next,omitempty"`
}

// Report is every check's result.
type Report struct {
	Healthy bool   `json:"healthy"`
	Lines   []Line `json:"checks"`
}

// Run runs the checks of the selected phases in order.
func Run(ctx context.Context, checks []Check, selected map[step.Tag]bool) Report {
	r := Report{Healthy: true}
	state := map[string]State{}
	for _, c := range checks {
		if !selected[c.Phase] {
			continue
		}
		l := Line{Phase: c.Phase, Check: c.Name}
		blocked := ""
		for _, n := range c.Needs {
			if st, ran := state[n]; ran && st != OK {
				blocked = n
				break
			}
		}
		if blocked != "" {
			l.State, l.Detail = Skipped, "needs "+blocked
		} else {
			f := c.Run(ctx)
			l.Detail, l.Next = f.Detail, f.Next
			if !f.OK {
				l.State = Unhealthy
				r.Healthy = false
			}
		}
		state[c.Name] = l.State
		r.Lines = append(r.Lines, l)
	}
	return r
}

// Unhealthy lists the checks that failed, as phase/check.
func (r Report) Unhealthy() []string {
	var out []string
	for _, l := range r.Lines {
		if l.State == Unhealthy {
			out = append(out, string(l.Phase)+"/"+l.Check)
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
	fmt.Fprintln(tw, "PHASE\tCHECK\tSTATUS\tDETAIL")
	for _, l := range r.Lines {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", l.Phase, l.Check, l.State, m.String(l.Detail))
		if l.Next != "" {
			fmt.Fprintf(tw, "\t\t\tnext: %s\n", m.String(l.Next))
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

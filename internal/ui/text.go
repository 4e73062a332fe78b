// Package ui renders engine events for people (text, with a live spinner on
// a terminal) and for programs (one JSON object per event). Every string
// passes through the run's redactor on its way out.
package ui

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/diff"
	"github.com/mgmtctl/mgmtctl/internal/engine"
	"github.com/mgmtctl/mgmtctl/internal/redact"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// TextOptions shape the human view.
type TextOptions struct {
	Diff    bool // print each change's effects, and unified diffs of changed files and manifests
	Verbose bool // print ok steps' notes and progress lines
	// Terminal enables the live spinner: the output is a TTY. Otherwise a
	// running step gets a line saying it still runs every Heartbeat (zero:
	// DefaultHeartbeat).
	Terminal  bool
	Heartbeat time.Duration
	Redactor  *redact.Redactor
	// LogPath is printed when a run fails, so the user finds the details.
	LogPath string
}

// Text is the human view: one line per step as it ends, diffs under it, a
// recap per host at the end.
type Text struct {
	mu      sync.Mutex
	w       io.Writer
	o       TextOptions
	live    *live
	failure *engine.Event
}

// NewText returns a text view writing to w.
func NewText(w io.Writer, o TextOptions) *Text {
	return &Text{w: o.Redactor.Writer(w), o: o}
}

var _ engine.Listener = (*Text)(nil)

func (t *Text) printf(format string, args ...any) { fmt.Fprintf(t.w, format, args...) }

// Event implements engine.Listener.
func (t *Text) Event(e engine.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch e.Kind {
	case engine.RunStart:
		if e.Check {
			t.printf("check mode: nothing will be changed\n")
		}
	case engine.PhaseStart:
		t.printf("\nPHASE [%s] %s\n", e.Phase, strings.Repeat("*", max(0, 60-len(e.Phase))))
	case engine.StepStart:
		t.live = startLive(t.w, &t.mu, e.Phase, e.Step, e.Time, t.o.Terminal, cmp.Or(t.o.Heartbeat, DefaultHeartbeat))
	case engine.StepProgress:
		if !t.o.Terminal {
			t.printf("  ... %s/%s: %s\n", e.Phase, e.Step, e.Message)
		}
		if t.live != nil {
			t.live.message(e.Message)
		}
	case engine.StepEnd:
		if t.live != nil {
			t.live.stop()
			t.live = nil
		}
		t.stepEnd(e)
	case engine.RunEnd:
		t.recap(e)
	}
}

func label(e engine.Event) string {
	if e.Check && e.Outcome == step.Changed {
		return "changed (check)"
	}
	return e.Outcome.String()
}

func summary(e engine.Event) string {
	switch {
	case e.Outcome == step.Failed && e.Err != nil:
		return e.Err.Error()
	case len(e.Changes) > 0:
		parts := make([]string, len(e.Changes))
		for i, c := range e.Changes {
			parts[i] = c.Summary
		}
		return strings.Join(parts, "; ")
	}
	return e.Note
}

func (t *Text) stepEnd(e engine.Event) {
	name := string(e.Phase) + "/" + e.Step
	host := ""
	if e.Host != "" {
		host = " [" + e.Host + "]"
	}
	line := fmt.Sprintf("%s:%s %s", label(e), host, name)
	if s := summary(e); s != "" {
		line += ": " + s
	}
	t.printf("%s (%s)\n", line, e.Duration.Round(100*time.Millisecond))
	for _, w := range e.Warnings {
		t.printf("  [WARNING] %s\n", w)
	}
	if t.o.Diff {
		for _, c := range e.Changes {
			for _, ef := range c.Effects {
				t.printf("    effect: %s\n", ef.String())
			}
			if c.Diff == nil {
				continue
			}
			d := diff.Unified(c.Diff.Path+" (current)", c.Diff.Path+" (desired)", c.Diff.Before, c.Diff.After)
			for _, l := range strings.SplitAfter(strings.TrimSuffix(d, "\n"), "\n") {
				t.printf("    %s", strings.TrimSuffix(l, "\n")+"\n")
			}
		}
	}
	if e.Outcome == step.Failed {
		ev := e
		t.failure = &ev
	}
}

func (t *Text) recap(e engine.Event) {
	r := e.Recap
	t.printf("\nRECAP %s\n", strings.Repeat("*", 60))
	width := 0
	for _, h := range r.HostNames() {
		width = max(width, len(h))
	}
	for _, h := range r.HostNames() {
		c := r.Hosts[h]
		t.printf("%-*s : ok=%d changed=%d failed=%d skipped=%d\n", width, h, c.OK, c.Changed, c.Failed, c.Skipped)
	}
	c := r.Total
	verb := "changed"
	if e.Check {
		verb = "pending"
	}
	t.printf("total: ok=%d changed=%d failed=%d skipped=%d", c.OK, c.Changed, c.Failed, c.Skipped)
	switch {
	case e.Interrupted:
		t.printf(" (interrupted: stopped after the step in flight)\n")
	case c.Failed == 0 && c.Changed == 0:
		t.printf(" (nothing %s)\n", verb)
	case e.Check:
		t.printf(" (check mode: %d steps would change)\n", c.Changed)
	default:
		t.printf("\n")
	}
	if t.failure != nil && t.o.LogPath != "" {
		t.printf("failed: %s/%s; the full debug log is %s\n", t.failure.Phase, t.failure.Step, t.o.LogPath)
	}
}

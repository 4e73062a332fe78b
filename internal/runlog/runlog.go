// Package runlog writes the full debug log of one run (every command, its
// exit code and output tail, every event), with secrets redacted, to a
// private file under the user's cache directory. Its path is printed when
// a run fails.
package runlog

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/engine"
	"github.com/mgmtctl/mgmtctl/internal/redact"
)

// Keep is how many run logs are kept; older ones are removed.
const Keep = 20

// Log is one run's debug log. It is an engine.Listener.
type Log struct {
	Path   string
	Logger *slog.Logger
	f      *os.File
}

var _ engine.Listener = (*Log)(nil)

// Dir returns the directory run logs go to, under cacheDir.
func Dir(cacheDir string) string { return filepath.Join(cacheDir, "mgmtctl", "runs") }

// Open creates a new log in dir for a run of the named cluster.
func Open(dir, name string, x *redact.Redactor, now time.Time) (*Log, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create log directory: %w", err)
	}
	if name == "" {
		name = "run"
	}
	// CreateTemp makes the name unique (two runs in one millisecond) and
	// the file 0600.
	f, err := os.CreateTemp(dir, fmt.Sprintf("%s-%s-*.log", now.UTC().Format("20060102T150405.000Z"), name))
	if err != nil {
		return nil, fmt.Errorf("create debug log: %w", err)
	}
	path := f.Name()
	prune(dir, Keep)
	h := slog.NewTextHandler(x.Writer(f), &slog.HandlerOptions{Level: slog.LevelDebug})
	return &Log{Path: path, Logger: slog.New(h), f: f}, nil
}

// prune removes all but the newest keep logs (names sort by time).
func prune(dir string, keep int) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	var logs []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".log") {
			logs = append(logs, e.Name())
		}
	}
	sort.Strings(logs)
	for len(logs) > keep {
		_ = os.Remove(filepath.Join(dir, logs[0]))
		logs = logs[1:]
	}
}

// Event implements engine.Listener: every event lands in the log.
func (l *Log) Event(e engine.Event) {
	attrs := []any{"phase", e.Phase, "step", e.Step, "host", e.Host}
	switch e.Kind {
	case engine.RunStart:
		l.Logger.Info("run start", "check", e.Check, "phases", e.Phases)
		return
	case engine.StepEnd:
		attrs = append(attrs, "outcome", e.Outcome.String(), "ms", e.Duration.Milliseconds())
		for i, c := range e.Changes {
			attrs = append(attrs, fmt.Sprintf("change%d", i), c.Action.String()+" "+c.Target+": "+c.Summary)
		}
		for i, w := range e.Warnings {
			attrs = append(attrs, fmt.Sprintf("warning%d", i), w)
		}
		if e.Note != "" {
			attrs = append(attrs, "note", e.Note)
		}
		if e.Err != nil {
			attrs = append(attrs, "err", e.Err.Error())
			l.Logger.Error("step failed", attrs...)
			return
		}
	case engine.StepProgress:
		attrs = append(attrs, "msg", e.Message)
	case engine.RunEnd:
		t := e.Recap.Total
		l.Logger.Info("recap", "ok", t.OK, "changed", t.Changed, "failed", t.Failed, "skipped", t.Skipped, "interrupted", e.Interrupted)
		return
	}
	l.Logger.Debug(e.Kind.String(), attrs...)
}

// Close flushes and closes the log.
func (l *Log) Close() error { return l.f.Close() }

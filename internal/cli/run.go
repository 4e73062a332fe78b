package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/engine"
	"github.com/mgmtctl/mgmtctl/internal/redact"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/runlog"
	"github.com/mgmtctl/mgmtctl/internal/session"
	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/ui"
)

// run is what a command that may change things shares with the others
// (apply, backup, restore, destroy): the loaded config, the redactor, the
// session, and once opened the debug log and the SSH dialer writing to it.
type run struct {
	g   *global
	o   *Options
	l   *config.Loaded
	x   *redact.Redactor
	log *runlog.Log
	s   *session.Session
	// preflightTook is how long the run's preflight took (--timings).
	preflightTook time.Duration
}

// newRun loads the config and makes the run's session; nothing is opened
// yet, so a usage error found next leaves no debug log behind.
func newRun(g *global, o *Options) (*run, error) {
	l, x, err := g.loadForRun(o)
	if err != nil {
		return nil, err
	}
	s := &session.Session{Config: l, Redact: x.Add, Holder: fmt.Sprintf("%s@%s pid %d", o.Getenv("USER"), o.Hostname, o.Pid)}
	return &run{g: g, o: o, l: l, x: x, s: s}, nil
}

// open starts the debug log and gives the session its dialer.
func (r *run) open() error {
	if err := r.l.RequireMgmtctlSecret(); err != nil {
		return printConfigErrors(r.o, err)
	}
	log, err := runlog.Open(runlog.Dir(r.o.CacheDir), r.l.Cluster.Metadata.Name, r.x, r.o.Now())
	if err != nil {
		return err
	}
	r.log = log
	r.s.Log = log.Logger
	r.s.Dialer = &remote.Dialer{AgentSocket: r.o.Getenv("SSH_AUTH_SOCK"), Log: log.Logger, Redactor: r.x, Retry: remote.Retry{Attempts: 4},
		KeepAlive: keepAlive(r.l.Cluster.Spec.SSH)}
	return nil
}

// keepAlive is the config's spec.ssh as the remote layer takes it.
func keepAlive(s config.SSH) remote.KeepAlive {
	return remote.KeepAlive{Interval: s.Interval, CountMax: s.ServerAliveCountMax}
}

// openRun is newRun then open, for the day-two commands.
func openRun(g *global, o *Options) (*run, error) {
	r, err := newRun(g, o)
	if err != nil {
		return nil, err
	}
	return r, r.open()
}

func (r *run) close() {
	r.s.Close()
	r.log.Close()
}

// listeners are the debug log, the session's run record and the view of
// the run's events: text (with diffs if asked) or JSON lines.
func (r *run) listeners(diff bool) engine.Listener {
	rec := runRecord{r.s, r.log}
	if r.g.output == "json" {
		return engine.Listeners{r.log, rec, ui.NewJSON(r.o.Out, r.x, diff)}
	}
	return engine.Listeners{r.log, rec, ui.NewText(r.o.Out, ui.TextOptions{Diff: diff, Verbose: r.g.verbose, Terminal: r.o.Terminal, Redactor: r.x, LogPath: r.log.Path})}
}

// runRecord hands each failed step's error to the session, which keeps
// the run's record of what it saw (session.Session.StepFailed); a record
// that cannot be written is said in the debug log, and the run's outcome
// stays the step's.
type runRecord struct {
	s   *session.Session
	log *runlog.Log
}

func (rr runRecord) Event(e engine.Event) {
	if e.Kind != engine.StepEnd || e.Outcome != step.Failed || e.Err == nil {
		return
	}
	if err := rr.s.StepFailed(e.Host, e.Err); err != nil {
		rr.log.Logger.Warn("run record", "err", err)
	}
}

// info is where a command's prose goes: stdout, or stderr beside JSON.
func (r *run) info() io.Writer {
	if r.g.output == "json" {
		return r.o.Err
	}
	return r.o.Out
}

func (r *run) fail(err error) error {
	fmt.Fprintf(r.o.Err, "error: %s\n%s", r.x.String(err.Error()), nextHint(err))
	return reported{err}
}

// confirm asks for the cluster's name unless yes; a closed or wrong
// answer is no.
func (r *run) confirm(yes bool, what string) bool {
	if yes {
		return true
	}
	name := r.l.Cluster.Metadata.Name
	fmt.Fprintf(r.o.Err, "Type the cluster's name (%s) to %s: ", name, what)
	if answer := readLine(r.o.In); answer != name {
		fmt.Fprintf(r.o.Err, "\nnot confirmed (got %q): nothing was removed or changed; --yes skips the question\n", answer)
		return false
	}
	return true
}

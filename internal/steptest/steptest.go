// Package steptest has small hand-written steps over an in-memory world, for
// testing the engine, the views and the CLI without a lab.
package steptest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// World is the state fake steps observe and change; it is also the
// run's step.Executor, carrying out their effects on itself. Applied
// records every mutation in order, so a test can assert that check mode
// made none.
type World struct {
	mu      sync.Mutex
	Files   map[string]string
	Applied []string
	// Fail makes the effect on this path or host fail with its error.
	Fail map[string]error
	// Hooks run as the Run effect of their command starts: a step
	// holding the run mid-effect, or reporting progress.
	Hooks map[string]func(ctx context.Context) error
}

var _ step.Executor = (*World)(nil)

// Do implements step.Executor over the world: a WriteLocal sets a file, a
// Run is recorded; any other effect is not of this world.
func (w *World) Do(ctx context.Context, effects []effect.Effect) ([]remote.Result, error) {
	var out []remote.Result
	for _, e := range effects {
		out = append(out, remote.Result{})
		switch e := e.(type) {
		case effect.WriteLocal:
			if err := w.Fail[e.Path]; err != nil {
				return out, err
			}
			w.mu.Lock()
			w.Files[e.Path] = string(e.Content)
			w.mu.Unlock()
			w.record("write " + e.Path)
		case effect.Run:
			if err := w.Fail[e.Host]; err != nil {
				return out, err
			}
			if h := w.Hooks[e.Cmd.String()]; h != nil {
				if err := h(ctx); err != nil {
					return out, err
				}
			}
			w.record("run " + e.Cmd.String())
		default:
			return out, fmt.Errorf("steptest: %T is not an effect of this world", e)
		}
	}
	return out, nil
}

// NewWorld returns an empty world.
func NewWorld() *World { return &World{Files: map[string]string{}} }

func (w *World) get(path string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	v, ok := w.Files[path]
	return v, ok
}

func (w *World) record(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.Applied = append(w.Applied, s)
}

// Set changes a file of the world, as something outside the run would.
func (w *World) Set(path, content string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.Files[path] = content
}

// Mutations returns a copy of what was applied so far.
func (w *World) Mutations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.Applied...)
}

// File converges one file of the world to Content.
type File struct {
	StepID, HostName string
	Path, Content    string
	W                *World
	// ApplyErr makes carrying out the plan fail (after the check found a
	// change), the write not made.
	ApplyErr error
	// CheckErr makes Check fail.
	CheckErr error
	// Skip makes Check skip with this reason.
	Skip string
}

var _ step.Step = (*File)(nil)

// ID implements step.Step.
func (f *File) ID() string { return f.StepID }

// Host implements step.Step.
func (f *File) Host() string { return f.HostName }

// Check implements step.Step.
func (f *File) Check(ctx context.Context) (step.Plan, error) {
	if f.CheckErr != nil {
		return step.Plan{}, f.CheckErr
	}
	if f.Skip != "" {
		return step.Plan{Skip: f.Skip}, nil
	}
	cur, ok := f.W.get(f.Path)
	if ok && cur == f.Content {
		return step.Plan{Note: f.Path + " up to date"}, nil
	}
	if f.ApplyErr != nil {
		f.W.mu.Lock()
		if f.W.Fail == nil {
			f.W.Fail = map[string]error{}
		}
		f.W.Fail[f.Path] = f.ApplyErr
		f.W.mu.Unlock()
	}
	action, summary := step.Update, "update "+f.Path
	if !ok {
		action, summary = step.Create, "create "+f.Path
	}
	return step.Plan{
		Changes: []step.Change{{Target: f.Path, Action: action, Summary: summary,
			Diff: &step.Diff{Path: f.Path, Before: cur, After: f.Content}, Effects: []effect.Effect{effect.WriteLocal{Path: f.Path, Content: []byte(f.Content)}}}},
	}, nil
}

// Wait is a Waiter over the world: done once Path holds Want. Its Check
// plans nothing; its wait ends when Release is closed (after which it
// looks again), or fails when ctx ends.
type Wait struct {
	StepID, HostName string
	Path, Want       string
	W                *World
	Release          <-chan struct{}
	// Timeout is the wait's Bound (a minute when zero).
	Timeout time.Duration
	// Waited counts calls of Wait; Observed, calls of Observe.
	Waited, Observed int
	// HadDeadline says Wait's context had a deadline.
	HadDeadline bool
	// OwnTimeout makes a wait that runs out of its bound say so itself,
	// as a step.TimeoutError; otherwise it returns the bare deadline.
	OwnTimeout bool
}

var _ step.Waiter = (*Wait)(nil)

// ID implements step.Step.
func (s *Wait) ID() string { return s.StepID }

// Host implements step.Step.
func (s *Wait) Host() string { return s.HostName }

// Check implements step.Step.
func (s *Wait) Check(ctx context.Context) (step.Plan, error) {
	return step.Plan{Note: s.Path + " is " + s.Want}, nil
}

// Observe implements step.Waiter.
func (s *Wait) Observe(ctx context.Context) (bool, string, error) {
	s.Observed++
	cur, _ := s.W.get(s.Path)
	if cur == s.Want {
		return true, "", nil
	}
	return false, s.Path + " is " + cur + ", not " + s.Want, nil
}

// Bound implements step.Waiter.
func (s *Wait) Bound() time.Duration {
	if s.Timeout == 0 {
		return time.Minute
	}
	return s.Timeout
}

// Wait implements step.Waiter.
func (s *Wait) Wait(ctx context.Context) error {
	s.Waited++
	_, s.HadDeadline = ctx.Deadline()
	if done, _, _ := s.Observe(ctx); done {
		return nil
	}
	select {
	case <-s.Release:
	case <-ctx.Done():
	}
	done, why, _ := s.Observe(ctx)
	switch {
	case done:
		return nil
	case ctx.Err() != nil && s.OwnTimeout:
		return step.Timeout(s.Bound(), ctx.Err(), "%s not reached after %s: %s", s.Want, s.Bound(), why)
	case ctx.Err() != nil:
		return fmt.Errorf("still waiting: %s: %w", why, ctx.Err())
	}
	return errors.New("still waiting: " + why)
}

// Action is a step that always has one thing to run: the command named
// after it, on its host.
type Action struct {
	StepID, HostName string
	W                *World
	// Progress messages are reported while its command runs.
	Progress []string
	// Block, if set, is waited on while its command runs (or until ctx is
	// done), to hold a run mid-step.
	Block <-chan struct{}
}

var _ step.Step = (*Action)(nil)

// ID implements step.Step.
func (a *Action) ID() string { return a.StepID }

// Host implements step.Step.
func (a *Action) Host() string { return a.HostName }

// Check implements step.Step. The first Check registers the command's
// hook with the world.
func (a *Action) Check(ctx context.Context) (step.Plan, error) {
	a.W.mu.Lock()
	if a.W.Hooks == nil {
		a.W.Hooks = map[string]func(context.Context) error{}
	}
	a.W.Hooks[a.StepID] = a.hook
	a.W.mu.Unlock()
	return step.Plan{Changes: []step.Change{{Target: a.StepID, Action: step.Run, Summary: "run " + a.StepID,
		Effects: []effect.Effect{effect.Run{Host: a.HostName, Cmd: remote.Command(a.StepID)}}}}}, nil
}

func (a *Action) hook(ctx context.Context) error {
	for _, m := range a.Progress {
		step.Progress(ctx, m)
	}
	if a.Block != nil {
		select {
		case <-a.Block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Executor is the run's executor over test hosts (found by their names)
// and a test cluster (nil: none), for a step's test to carry out its plan
// as a run does (step.CarryOut).
func Executor(cluster *kube.Cluster, hosts ...remote.Host) *effect.Executor {
	return &effect.Executor{
		Host: func(ctx context.Context, name string) (remote.Host, error) {
			for _, h := range hosts {
				if h.Name() == name {
					return h, nil
				}
			}
			return nil, fmt.Errorf("steptest: no host %s", name)
		},
		Cluster: func(ctx context.Context) (*kube.Cluster, error) { return cluster, nil },
	}
}

// Effects is what a plan's changes do, as their effects say it, in order.
func Effects(p step.Plan) []string {
	var out []string
	for _, c := range p.Changes {
		for _, e := range c.Effects {
			out = append(out, e.String())
		}
	}
	return out
}

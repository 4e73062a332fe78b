// Package engine runs phases of steps: it selects phases by tag, asks each
// step for its plan, applies it (or, in check mode, only reports it), and
// emits events that views render and the recap counts.
package engine

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Options select what a run does.
type Options struct {
	// Check reports what would change and changes nothing.
	Check bool
	// Tags, when not empty, selects phases; SkipTags removes phases.
	Tags     []step.Tag
	SkipTags []step.Tag
	// Now is the clock, for tests; nil means time.Now.
	Now func() time.Time
	// Listed, when set, are the plans a check run showed and the user
	// approved (a Listed is a Listener that collects them): a run then
	// carries out exactly those, and a step whose plan is not the one
	// listed fails with a *PlanChangedError before it changes anything.
	Listed *Listed
	// Exec carries out the plans' effects; a run that may change
	// anything needs one (check mode never calls it).
	Exec step.Executor
	// Lost, when set, says whether the connection to a host has been
	// given up (its link went silent): a step waiting on that host then
	// fails with that error at once, rather than at its bound.
	Lost func(host string) error
}

// StepKey names one step of a run.
type StepKey struct {
	Phase      step.Tag
	Step, Host string
}

// Listed is the plans of a check run, step by step in run order; it is a
// Listener. Steps of one ID on one host (the laptop's file for each
// server) are told apart by their order.
type Listed struct{ steps []listedStep }

type listedStep struct {
	key  StepKey
	plan step.Plan
}

// Event implements Listener: it records each step's plan as checked.
func (l *Listed) Event(e Event) {
	if e.Kind != StepEnd || e.Outcome == step.Failed || e.Step == "gather-facts" {
		return
	}
	l.steps = append(l.steps, listedStep{StepKey{e.Phase, e.Step, e.Host}, step.Plan{Changes: e.Changes}})
}

// plan is the nth listed plan of key k (none when there is none).
func (l *Listed) plan(k StepKey, n int) step.Plan {
	for _, s := range l.steps {
		if s.key != k {
			continue
		}
		if n == 0 {
			return s.plan
		}
		n--
	}
	return step.Plan{}
}

// count is how many listed steps have key k.
func (l *Listed) count(k StepKey) int {
	n := 0
	for _, s := range l.steps {
		if s.key == k {
			n++
		}
	}
	return n
}

// Changes is every listed change, in the order of the steps.
func (l *Listed) Changes() []step.Change {
	var out []step.Change
	for _, s := range l.steps {
		out = append(out, s.plan.Changes...)
	}
	return out
}

// Diff says how other differs from l, step by step, or "" when they list
// the same changes.
func (l *Listed) Diff(other *Listed) string {
	keys := map[StepKey]bool{}
	for _, s := range append(append([]listedStep(nil), l.steps...), other.steps...) {
		keys[s.key] = true
	}
	var lines []string
	for k := range keys {
		for n := range max(l.count(k), other.count(k)) {
			a, b := summaries(l.plan(k, n)), summaries(other.plan(k, n))
			if a != b {
				lines = append(lines, fmt.Sprintf("%s/%s on %s: listed %s, now %s", k.Phase, k.Step, k.Host, orNothing(a), orNothing(b)))
			}
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// summaries is how a plan reads to its user: each change's action,
// target and summary, and what its diff shows (hashed: a secret stays
// out of messages).
func summaries(p step.Plan) string {
	var parts []string
	for _, c := range p.Changes {
		part := c.Action.String() + " " + c.Target + ": " + c.Summary
		if c.Diff != nil {
			sum := sha256.Sum256([]byte(c.Diff.Before + "\x00" + c.Diff.After))
			part += fmt.Sprintf(" (diff %x)", sum[:4])
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}

func orNothing(s string) string {
	if s == "" {
		return "nothing"
	}
	return "[" + s + "]"
}

// PlanChangedError is a step whose plan is no longer the one listed.
type PlanChangedError struct {
	Listed, Now step.Plan
}

func (e *PlanChangedError) Error() string {
	return fmt.Sprintf("the plan changed since it was listed: listed %s, now %s; nothing of it was carried out", orNothing(summaries(e.Listed)), orNothing(summaries(e.Now)))
}

// StepError is the failure of one step, with where it happened.
type StepError struct {
	Phase step.Tag
	Step  string
	Host  string
	Err   error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("%s/%s on %s: %v", e.Phase, e.Step, e.Host, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// ErrInterrupted is returned when the run stopped because ctx was cancelled
// between steps.
var ErrInterrupted = errors.New("interrupted")

// Result is what a run did.
type Result struct {
	Recap *Recap
	// Pending is the number of changes a check run found (in a normal run,
	// the number of steps that changed).
	Pending int
}

// SelectPhases returns the phases chosen by tags and skipTags, in run order,
// or an error naming an unknown tag.
func SelectPhases(phases []step.Phase, tags, skipTags []step.Tag) ([]step.Phase, error) {
	known := map[step.Tag]bool{}
	for _, p := range phases {
		known[p.Tag] = true
	}
	for _, t := range append(append([]step.Tag{}, tags...), skipTags...) {
		if !known[t] {
			names := make([]string, 0, len(phases))
			for _, p := range phases {
				names = append(names, string(p.Tag))
			}
			return nil, fmt.Errorf("unknown tag %q (tags: %s)", t, strings.Join(names, ", "))
		}
	}
	in := func(t step.Tag, set []step.Tag) bool {
		for _, s := range set {
			if s == t {
				return true
			}
		}
		return false
	}
	var out []step.Phase
	for _, p := range phases {
		if len(tags) > 0 && !in(p.Tag, tags) {
			continue
		}
		if in(p.Tag, skipTags) {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// Run converges the selected phases in order. It stops at the first failed
// step (later phases build on earlier ones) and between steps when ctx is
// cancelled. Every step's outcome is emitted to l before Run returns, and
// the last event is always RunEnd with the recap.
func Run(ctx context.Context, phases []step.Phase, opts Options, l Listener) (*Result, error) {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	selected, err := SelectPhases(phases, opts.Tags, opts.SkipTags)
	if err != nil {
		return nil, err
	}
	r := &runner{ctx: ctx, opts: opts, now: now, recap: NewRecap()}
	r.l = Listeners{r.recap, l}
	tags := make([]step.Tag, len(selected))
	for i, p := range selected {
		tags[i] = p.Tag
	}
	r.emit(Event{Kind: RunStart, Phases: tags})
	for _, p := range selected {
		if err = r.phase(p); err != nil {
			break
		}
	}
	if err != nil && ctx.Err() != nil && !errors.Is(err, ErrInterrupted) {
		// The step in flight gave up because of the interrupt (a wait
		// was cancelled): that is an interruption, not a failure.
		err = fmt.Errorf("%w: %w", ErrInterrupted, err)
	}
	r.emit(Event{Kind: RunEnd, Recap: r.recap, Interrupted: errors.Is(err, ErrInterrupted)})
	return &Result{Recap: r.recap, Pending: r.recap.Total.Changed}, err
}

type runner struct {
	ctx   context.Context
	opts  Options
	now   func() time.Time
	l     Listener
	recap *Recap
	// seen counts the steps of each key run so far, to find each one's
	// listed plan.
	seen map[StepKey]int
	// carried counts the plans carried out so far: a plan checked ahead
	// holds only while it has not moved.
	carried int
	// ahead are the phase's Checks run ahead: a change cancels those
	// still reading and waits for them to return, so that no read ahead
	// overlaps what a step changes (or what its Finish records in
	// memory); their steps check again at their turn.
	ahead []*checked
}

// checked is a step's Check run ahead of its turn (step.Independent).
type checked struct {
	done    chan struct{}
	cancel  context.CancelFunc
	carried int // runner.carried when the Check started
	plan    step.Plan
	err     error
}

// checkAhead starts the Check of each independent step of steps, side by
// side, and returns them by index (nil for the others). A Check run ahead
// reports no progress (the step has not started, as the output shows it).
func (r *runner) checkAhead(ctx context.Context, steps []step.Step) []*checked {
	ahead := make([]*checked, len(steps))
	for i, s := range steps {
		if _, ok := s.(step.Independent); !ok {
			continue
		}
		if _, ok := s.(step.Conditional); ok {
			continue
		}
		cctx, cancel := context.WithCancel(ctx)
		c := &checked{done: make(chan struct{}), cancel: cancel, carried: r.carried}
		ahead[i] = c
		go func() {
			defer close(c.done)
			c.plan, c.err = s.Check(cctx)
		}()
	}
	return ahead
}

// plan is the step's plan for its turn: the one checked ahead when it
// still holds, or a Check now. A plan checked ahead holds only when it
// has nothing to change: a change is decided on what is true at its
// turn (a restart's quorum gate read the etcd members' health when the
// phase started, maybe minutes before), so a step with changes checks
// again; a converged run, whose plans are empty, checks each step once.
func (r *runner) plan(ctx context.Context, s step.Step, ahead *checked) (step.Plan, error) {
	if ahead != nil {
		select {
		case <-ahead.done:
		case <-ctx.Done():
			return step.Plan{}, ctx.Err()
		}
		if ahead.err == nil && ahead.plan.Skip == "" && (ahead.plan.Empty() || r.opts.Check) && ahead.carried == r.carried {
			return ahead.plan, nil
		}
	}
	return s.Check(ctx)
}

func (r *runner) emit(e Event) {
	e.Time = r.now()
	e.Check = r.opts.Check
	r.l.Event(e)
}

// progress forwards a step's progress reports as events.
type progress struct {
	r        *runner
	phase    step.Tag
	id, host string
}

func (p progress) Progress(msg string) {
	p.r.emit(Event{Kind: StepProgress, Phase: p.phase, Step: p.id, Host: p.host, Message: msg})
}

func (r *runner) interrupted() error {
	if r.ctx.Err() != nil {
		return ErrInterrupted
	}
	return nil
}

func (r *runner) phase(p step.Phase) error {
	r.emit(Event{Kind: PhaseStart, Phase: p.Tag})
	if err := r.interrupted(); err != nil {
		return err
	}
	if p.Prepare != nil {
		start := r.now()
		r.emit(Event{Kind: StepStart, Phase: p.Tag, Step: "gather-facts"})
		ctx := step.WithReporter(r.ctx, progress{r, p.Tag, "gather-facts", ""})
		host, err := p.Prepare(ctx)
		e := Event{Kind: StepEnd, Phase: p.Tag, Step: "gather-facts", Host: host, Outcome: step.OK, Duration: r.now().Sub(start)}
		if err != nil {
			e.Outcome, e.Err = step.Failed, err
			r.emit(e)
			return &StepError{Phase: p.Tag, Step: "gather-facts", Host: host, Err: err}
		}
		r.emit(e)
	}
	// The Checks run ahead end with the phase: one the phase did not
	// reach (a step before it failed) is not left reading.
	actx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	ahead := r.checkAhead(actx, p.Steps)
	r.ahead = ahead
	defer func() { r.ahead = nil }()
	for i, s := range p.Steps {
		if err := r.interrupted(); err != nil {
			return err
		}
		if err := r.step(p.Tag, s, ahead[i]); err != nil {
			return err
		}
	}
	return nil
}

// step runs one step: its check (or the one run ahead, while it holds),
// then in a run its plan and its wait.
func (r *runner) step(tag step.Tag, s step.Step, ahead *checked) error {
	var applies error
	if c, ok := s.(step.Conditional); ok {
		ok, err := c.Applies(r.ctx)
		if err == nil && !ok {
			return nil
		}
		applies = err
	}
	start := r.now()
	base := Event{Phase: tag, Step: s.ID(), Host: s.Host()}
	started := base
	started.Kind = StepStart
	r.emit(started)
	ctx := step.WithReporter(r.ctx, progress{r, tag, s.ID(), s.Host()})

	end := base
	end.Kind = StepEnd
	fail := func(err error) error {
		end.Outcome, end.Err, end.Duration = step.Failed, err, r.now().Sub(start)
		r.emit(end)
		return &StepError{Phase: tag, Step: s.ID(), Host: s.Host(), Err: err}
	}

	if applies != nil {
		return fail(fmt.Errorf("check: %w", applies))
	}
	plan, err := r.plan(ctx, s, ahead)
	if err != nil {
		return fail(fmt.Errorf("check: %w", err))
	}
	if l := r.opts.Listed; l != nil && !r.opts.Check {
		k := StepKey{tag, s.ID(), s.Host()}
		if r.seen == nil {
			r.seen = map[StepKey]int{}
		}
		listed := l.plan(k, r.seen[k])
		r.seen[k]++
		if summaries(listed) != summaries(plan) {
			return fail(&PlanChangedError{Listed: listed, Now: plan})
		}
		// What was listed is what is carried out: its payloads are the
		// ones shown and approved, not the ones checked again.
		if plan.Skip == "" {
			listed.Warnings, listed.Note = plan.Warnings, plan.Note
			plan = listed
		}
	}
	if plan.Skip != "" {
		end.Outcome, end.Note, end.Warnings = step.Skipped, plan.Skip, plan.Warnings
		end.Duration = r.now().Sub(start)
		r.emit(end)
		return nil
	}
	w, waits := s.(step.Waiter)
	if r.opts.Check {
		// A step with changes to make would wait after them anyway; one
		// without is looked at once, and a state not reached yet pends.
		if waits && plan.Empty() {
			done, why, err := w.Observe(ctx)
			if err != nil {
				return fail(err)
			}
			if !done {
				plan.Changes = []step.Change{{Target: s.ID(), Action: step.Wait, Summary: "wait: " + why}}
			}
		}
	} else {
		if !plan.Empty() {
			if err := r.carryOut(ctx, s, plan); err != nil {
				return fail(err)
			}
		}
		if waits {
			if err := wait(ctx, w, r.opts.Lost); err != nil {
				return fail(err)
			}
		}
	}
	end.Warnings, end.Note, end.Changes = plan.Warnings, plan.Note, plan.Changes
	end.Outcome = step.OK
	if !plan.Empty() {
		end.Outcome = step.Changed
	}
	end.Duration = r.now().Sub(start)
	r.emit(end)
	return nil
}

// carryOut carries out the plan through the run's Executor: a step holds
// no Apply of its own, so what runs is what the plan lists.
func (r *runner) carryOut(ctx context.Context, s step.Step, plan step.Plan) error {
	if r.opts.Exec == nil {
		return errors.New("this run cannot change anything (no executor)")
	}
	// A Check still reading ahead would read what this changes: it is
	// cancelled (its step checks again at its turn, as it would anyway
	// once anything was carried out), not waited out.
	for _, c := range r.ahead {
		if c != nil {
			c.cancel()
		}
	}
	for _, c := range r.ahead {
		if c != nil {
			<-c.done
		}
	}
	r.carried++
	return step.CarryOut(ctx, s, plan, r.opts.Exec)
}

// LostPoll is how often a wait asks whether its host is gone.
var LostPoll = 500 * time.Millisecond

// wait runs w's wait under its bound: every wait of a run ends, one way
// or the other. With lost, a wait whose host's connection is given up
// meanwhile ends then, with that error: a waiter retries what fails (an
// API read through a dead link looks like any other), so it would
// otherwise wait out its whole bound for a host that is gone.
func wait(ctx context.Context, w step.Waiter, lost func(host string) error) error {
	bound := w.Bound()
	if bound <= 0 {
		return fmt.Errorf("%s has no bound for its wait", w.ID())
	}
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var hostGone error
	stopPoll := func() {}
	if lost != nil {
		pctx, cancelLost := context.WithCancel(wctx)
		wctx = pctx
		done := make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(LostPoll)
			defer t.Stop()
			for {
				select {
				case <-pctx.Done():
					return
				case <-t.C:
					if err := lost(w.Host()); err != nil {
						hostGone = err
						cancelLost()
						return
					}
				}
			}
		}()
		// hostGone is read only once the poll has ended.
		stopPoll = func() { cancelLost(); <-done }
	}
	err := w.Wait(wctx)
	stopPoll()
	if err != nil && hostGone != nil {
		return hostGone
	}
	var own *step.TimeoutError
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &own) {
		// A waiter's own TimeoutError names its bound with what it last
		// saw; a bare deadline still says why.
		return fmt.Errorf("gave up after %s: %w", bound, err)
	}
	return err
}

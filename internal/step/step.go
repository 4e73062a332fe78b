// Package step is the vocabulary of convergence: a Step observes the actual
// state and returns a Plan (the difference from the desired state, as a
// value: changes holding effects); it cannot carry the plan out. The
// engine hands exactly the plan's effects to the run's effect.Executor
// (CarryOut), and a Finisher reads back after them. Phases group steps and
// are the tags a user selects with --tags.
package step

import (
	"context"
	"fmt"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote"
)

// Outcome is how a step ended.
type Outcome int

// Outcomes, as counted in the recap.
const (
	OK Outcome = iota
	Changed
	Skipped
	Failed
)

var outcomeNames = [...]string{OK: "ok", Changed: "changed", Skipped: "skipped", Failed: "failed"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// MarshalText makes outcomes render as their names in JSON.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// Action is what a change does to its target.
type Action int

// Actions a change can take.
const (
	Create Action = iota
	Update
	Delete
	Run // an operation with effects but no object, e.g. a restart or a start
	// Wait is a state the system reaches by itself, still to be waited for
	// (check mode's word for a Waiter that is not done).
	Wait
)

var actionNames = [...]string{Create: "create", Update: "update", Delete: "delete", Run: "run", Wait: "wait"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// MarshalText makes actions render as their names in JSON.
func (a Action) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// Diff is the before and after of a file or manifest, for --diff.
type Diff struct {
	Path   string `json:"path"`
	Before string `json:"before"`
	After  string `json:"after"`
}

// Change is one difference a step found and would remove.
type Change struct {
	Target  string `json:"target"`
	Action  Action `json:"action"`
	Summary string `json:"summary"`
	Diff    *Diff  `json:"diff,omitempty"`
	// Effects are what carrying the change out does, in order: Check
	// computes them once, --diff lists them, and the engine hands exactly
	// these to the run's Executor. A change without effects can be shown
	// but not carried out yet (what it needs does not exist yet, as in a
	// check run before the VM exists): a run that reaches it fails with a
	// *NotYetError.
	Effects []effect.Effect `json:"-"`
}

// NotYetError is a change a run was to carry out that has no effects yet.
type NotYetError struct{ Change Change }

func (e *NotYetError) Error() string {
	return fmt.Sprintf("%s: not possible yet: what it needs does not exist", e.Change.Summary)
}

// Plan is what a step's Check found: nothing to do, a reason to skip, or
// changes to make. It is a value: it can be shown, then applied.
type Plan struct {
	Changes []Change
	// Skip, when set, says why the step does not apply in this run.
	Skip string
	// Warnings are drift or advice the step reports but leaves alone.
	Warnings []string
	// Note is a one-line account of the observed state, shown when the
	// step is ok or skipped.
	Note string
}

// Empty reports whether the plan changes nothing.
func (p Plan) Empty() bool { return len(p.Changes) == 0 }

// Step is one idempotent unit of convergence: Check observes and returns
// the plan; the engine carries out the plan's effects, exactly, through
// the run's Executor. A step has no way of its own to apply a plan.
//
// Check must not mutate anything, and a step has nothing to mutate with:
// the hosts it holds are remote.Readers (no method writes; a Check that
// calls Run or WriteFile does not compile), and the cluster it holds is a
// kube.Reader (likewise). The Executor alone holds what writes; the
// laptop's files, read through package os, are kept to reads by
// internal/layering's TestStepsDoNotWrite.
type Step interface {
	// ID is stable kebab-case, unique within its phase; it is what logs,
	// JSON events and tests refer to.
	ID() string
	// Host names the machine the step acts on, for the recap.
	Host() string
	Check(ctx context.Context) (Plan, error)
}

// Conditional is a step that belongs to a run only when Applies says so,
// as decided from the facts the phase gathered (the backup apply takes
// before a risky change): when it does not apply, the run has no such
// step, nothing about it is shown or counted, and its Check is not run.
// An error from Applies fails the step as a failed Check would.
type Conditional interface {
	Step
	Applies(ctx context.Context) (bool, error)
}

// Independent is a step whose Check depends only on what its phase's
// Prepare gathered and on the hosts' state now, never on what an earlier
// step of the run did or left in memory. The engine checks such steps
// ahead of their turn, side by side, as soon as the phase's facts are
// gathered, and keeps a step's plan for its turn only if the run has
// carried out nothing since, the Check succeeded and did not skip:
// otherwise it checks again then. On a converged run every phase's
// reads thus overlap; a run that changes something decides each later
// step on what it sees after the change, as before. A step says it is
// independent on purpose, and must not be Conditional.
type Independent interface {
	Step
	Independent()
}

// Finisher is a step with something to do once its plan was carried out:
// read back what the effects left (qm resize exits 0 whatever its worker
// did), take a value from their output for a later step, or say in the
// user's terms why an effect failed. out holds the result of each effect
// attempted, in plan order; err is the first failure's, or nil. Finish
// returns the step's error (err itself, wrapped, or one of its own).
type Finisher interface {
	Step
	Finish(ctx context.Context, out []remote.Result, err error) error
}

// CarryOut hands the plan's effects, every change's in order, to x, then
// the outcome to s's Finish, if it has one. It is how the engine carries
// out a plan, and how a step's test does.
func CarryOut(ctx context.Context, s Step, p Plan, x Executor) error {
	var effects []effect.Effect
	for _, c := range p.Changes {
		if len(c.Effects) == 0 {
			return &NotYetError{Change: c}
		}
		effects = append(effects, c.Effects...)
	}
	out, err := x.Do(ctx, effects)
	if f, ok := s.(Finisher); ok {
		return f.Finish(ctx, out, err)
	}
	return err
}

// Executor carries out effects (effect.Executor in a run; a test's fake in
// the engine's tests).
type Executor interface {
	Do(ctx context.Context, effects []effect.Effect) ([]remote.Result, error)
}

// Waiter is a step that also waits for a state the system reaches by
// itself once the step's plan (if any) is applied: a VM answering SSH, a
// node Ready, a chart usable, a provider Ready. The engine drives it, so
// no step knows the run's mode: in check mode and in status it observes
// once, and a state not reached yet is reported as a pending wait; in a
// run that may change things it waits, after its plan is carried out when
// there was one.
// Waiting is not a change: a step with an empty plan is ok once its wait
// ends.
type Waiter interface {
	Step
	// Observe looks once: whether the state is reached, and if not, what
	// the wait is still for.
	Observe(ctx context.Context) (done bool, waiting string, err error)
	// Bound is the longest the wait may take. The engine gives Wait a
	// context that ends then, so no wait runs unbounded: a VM that never
	// boots, a chart that never installs, fail the run in time.
	Bound() time.Duration
	// Wait blocks until the state is reached. When ctx's deadline passes,
	// it fails saying what it last saw and what to do.
	Wait(ctx context.Context) error
}

// Tag names a phase; --tags and --skip-tags select phases by tag.
type Tag string

// The phases, in the order a run takes them.
const (
	TagVM         Tag = "vm"
	TagK3s        Tag = "k3s"
	TagAddons     Tag = "addons"
	TagCAPI       Tag = "capi"
	TagKubeconfig Tag = "kubeconfig"
	TagInspector  Tag = "inspector"
)

// Tags lists every phase tag in run order.
var Tags = []Tag{TagVM, TagK3s, TagAddons, TagCAPI, TagKubeconfig, TagInspector}

// Phase is an ordered group of steps.
type Phase struct {
	Tag Tag
	// Prepare, if set, runs before the first step when the phase is
	// selected: it connects, takes locks and gathers the facts the steps
	// decide from. It is reported as the phase's "gather-facts" step.
	Prepare func(ctx context.Context) (host string, err error)
	Steps   []Step
}

// TagDestroy is the destroy command's phase; it is not among Tags, so no
// apply ever runs it.
const TagDestroy Tag = "destroy"

// The backup and restore commands' phases, also outside Tags.
const (
	TagBackup  Tag = "backup"
	TagRestore Tag = "restore"
)

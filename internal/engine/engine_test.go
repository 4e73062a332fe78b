package engine

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

// events records every event for assertions.
type events []Event

func (e *events) Event(ev Event) { *e = append(*e, ev) }

func (e events) ends() []string {
	var out []string
	for _, ev := range e {
		if ev.Kind == StepEnd {
			out = append(out, string(ev.Phase)+"/"+ev.Step+"="+ev.Outcome.String())
		}
	}
	return out
}

func phases(w *steptest.World) []step.Phase {
	return []step.Phase{
		{Tag: step.TagVM, Steps: []step.Step{
			&steptest.File{StepID: "image", HostName: "pve", Path: "/img", Content: "image", W: w},
			&steptest.File{StepID: "vm", HostName: "pve", Path: "/vm", Content: "vm 110", W: w},
		}},
		{Tag: step.TagK3s, Steps: []step.Step{
			&steptest.File{StepID: "config", HostName: "vm", Path: "/etc/k3s.yaml", Content: "tls-san: x", W: w},
			&steptest.File{StepID: "env", HostName: "vm", Path: "/etc/k3s.env", Content: "A=1", W: w},
		}},
	}
}

func TestConvergeThenNoop(t *testing.T) {
	w := steptest.NewWorld()
	var ev events
	res, err := Run(context.Background(), phases(w), Options{Exec: w}, &ev)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"vm/image=changed", "vm/vm=changed", "k3s/config=changed", "k3s/env=changed"}
	if got := ev.ends(); !reflect.DeepEqual(got, want) {
		t.Errorf("first run:\n got %v\nwant %v", got, want)
	}
	if got := w.Mutations(); len(got) != 4 {
		t.Errorf("mutations = %v", got)
	}
	if res.Recap.Total.Changed != 4 || res.Recap.Hosts["pve"].Changed != 2 || res.Recap.Hosts["vm"].Changed != 2 {
		t.Errorf("recap = %+v, hosts %+v %+v", res.Recap.Total, res.Recap.Hosts["pve"], res.Recap.Hosts["vm"])
	}

	ev = nil
	res, err = Run(context.Background(), phases(w), Options{Exec: w}, &ev)
	if err != nil {
		t.Fatal(err)
	}
	if res.Recap.Total != (Counts{OK: 4}) {
		t.Errorf("second run recap = %+v, want ok=4 changed=0", res.Recap.Total)
	}
	if len(w.Mutations()) != 4 {
		t.Errorf("second run mutated: %v", w.Mutations())
	}
}

func TestCheckMutatesNothing(t *testing.T) {
	w := steptest.NewWorld()
	var ev events
	res, err := Run(context.Background(), phases(w), Options{Check: true}, &ev)
	if err != nil {
		t.Fatal(err)
	}
	if m := w.Mutations(); len(m) != 0 {
		t.Fatalf("check mode mutated: %v", m)
	}
	// Pending changes are reported as changed.
	if res.Recap.Total.Changed != 4 || res.Pending != 4 {
		t.Errorf("check recap = %+v", res.Recap.Total)
	}
	for _, e := range ev {
		if !e.Check {
			t.Fatalf("event without Check flag in check mode: %+v", e)
		}
		if e.Kind == StepEnd && e.Step == "config" {
			if len(e.Changes) != 1 || e.Changes[0].Diff == nil || e.Changes[0].Diff.After != "tls-san: x" {
				t.Errorf("config step diff missing: %+v", e.Changes)
			}
		}
	}
}

func TestTags(t *testing.T) {
	tests := []struct {
		name       string
		tags, skip []step.Tag
		want       []step.Tag
		err        string
	}{
		{name: "all", want: []step.Tag{step.TagVM, step.TagK3s}},
		{name: "one", tags: []step.Tag{step.TagK3s}, want: []step.Tag{step.TagK3s}},
		{name: "order is run order", tags: []step.Tag{step.TagK3s, step.TagVM}, want: []step.Tag{step.TagVM, step.TagK3s}},
		{name: "skip", skip: []step.Tag{step.TagVM}, want: []step.Tag{step.TagK3s}},
		{name: "tag and skip", tags: []step.Tag{step.TagVM}, skip: []step.Tag{step.TagVM}},
		{name: "unknown", tags: []step.Tag{"vms"}, err: `unknown tag "vms" (tags: vm, k3s)`},
		{name: "unknown skip", skip: []step.Tag{"x"}, err: `unknown tag "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SelectPhases(phases(steptest.NewWorld()), tt.tags, tt.skip)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			var tags []step.Tag
			for _, p := range got {
				tags = append(tags, p.Tag)
			}
			if !reflect.DeepEqual(tags, tt.want) {
				t.Errorf("got %v, want %v", tags, tt.want)
			}
		})
	}
}

func TestFailureStopsRun(t *testing.T) {
	w := steptest.NewWorld()
	ps := phases(w)
	boom := errors.New("qm: VM 110 already exists")
	ps[0].Steps[1].(*steptest.File).ApplyErr = boom
	var ev events
	res, err := Run(context.Background(), ps, Options{Exec: w}, &ev)
	var se *StepError
	if !errors.As(err, &se) || !errors.Is(err, boom) || se.Step != "vm" || se.Host != "pve" || se.Phase != step.TagVM {
		t.Fatalf("err = %#v", err)
	}
	if got := ev.ends(); !reflect.DeepEqual(got, []string{"vm/image=changed", "vm/vm=failed"}) {
		t.Errorf("got %v; nothing may run after a failure", got)
	}
	if res.Recap.Total.Failed != 1 || ev[len(ev)-1].Kind != RunEnd {
		t.Errorf("recap = %+v, last event %v", res.Recap.Total, ev[len(ev)-1].Kind)
	}
}

func TestCheckErrorFails(t *testing.T) {
	w := steptest.NewWorld()
	ps := phases(w)
	ps[0].Steps[0].(*steptest.File).CheckErr = errors.New("cannot read")
	_, err := Run(context.Background(), ps, Options{Exec: w}, &events{})
	if err == nil || !strings.Contains(err.Error(), "vm/image on pve: check: cannot read") {
		t.Fatalf("err = %v", err)
	}
}

func TestSkip(t *testing.T) {
	w := steptest.NewWorld()
	ps := phases(w)
	ps[0].Steps[0].(*steptest.File).Skip = "image managed elsewhere"
	var ev events
	res, err := Run(context.Background(), ps, Options{Exec: w, Tags: []step.Tag{step.TagVM}}, &ev)
	if err != nil {
		t.Fatal(err)
	}
	if res.Recap.Total.Skipped != 1 {
		t.Errorf("recap = %+v", res.Recap.Total)
	}
	for _, e := range ev {
		if e.Kind == StepEnd && e.Step == "image" && e.Note != "image managed elsewhere" {
			t.Errorf("skip reason lost: %+v", e)
		}
	}
}

func TestPrepare(t *testing.T) {
	w := steptest.NewWorld()
	ps := phases(w)
	ps[0].Prepare = func(ctx context.Context) (string, error) { return "pve", errors.New("host key mismatch") }
	var ev events
	_, err := Run(context.Background(), ps, Options{Exec: w}, &ev)
	var se *StepError
	if !errors.As(err, &se) || se.Step != "gather-facts" {
		t.Fatalf("err = %v", err)
	}
	if len(w.Mutations()) != 0 {
		t.Errorf("steps ran after a failed prepare")
	}
}

// TestInterruptBetweenSteps: cancelling stops the run after the step in
// flight, and the recap still comes.
func TestInterruptBetweenSteps(t *testing.T) {
	w := steptest.NewWorld()
	ctx, cancel := context.WithCancel(context.Background())
	ps := []step.Phase{{Tag: step.TagVM, Steps: []step.Step{
		&steptest.File{StepID: "a", HostName: "h", Path: "/a", Content: "a", W: w},
		&cancelling{cancel},
		&steptest.File{StepID: "b", HostName: "h", Path: "/b", Content: "b", W: w},
	}}}
	var ev events
	_, err := Run(ctx, ps, Options{Exec: w}, &ev)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("err = %v", err)
	}
	if got := ev.ends(); !reflect.DeepEqual(got, []string{"vm/a=changed", "vm/cancel=changed"}) {
		t.Errorf("got %v", got)
	}
	if last := ev[len(ev)-1]; last.Kind != RunEnd || !last.Interrupted {
		t.Errorf("last event = %+v", last)
	}
}

type cancelling struct{ cancel func() }

func (c *cancelling) ID() string   { return "cancel" }
func (c *cancelling) Host() string { return "h" }
func (c *cancelling) Check(context.Context) (step.Plan, error) {
	return step.Plan{Changes: []step.Change{{Summary: "cancel", Effects: []effect.Effect{effect.Run{Host: "h", Cmd: remote.Command("cancel")}}}}}, nil
}
func (c *cancelling) Finish(context.Context, []remote.Result, error) error { c.cancel(); return nil }

// recording is an executor that keeps what it is handed.
type recording struct{ got [][]effect.Effect }

func (r *recording) Do(ctx context.Context, effects []effect.Effect) ([]remote.Result, error) {
	r.got = append(r.got, effects)
	return make([]remote.Result, len(effects)), nil
}

// planned is a step with a fixed plan.
type planned struct{ p step.Plan }

func (s *planned) ID() string                               { return "planned" }
func (s *planned) Host() string                             { return "h" }
func (s *planned) Check(context.Context) (step.Plan, error) { return s.p, nil }

// TestCarriesOutExactlyThePlan: the executor is handed the plan's effects,
// every change's in order, in one call per step, and nothing else; a
// change without effects fails the step before any effect (a
// *step.NotYetError); a run without an executor changes nothing.
func TestCarriesOutExactlyThePlan(t *testing.T) {
	a := effect.Run{Host: "h", Cmd: remote.Command("a")}
	b := effect.WriteLocal{Path: "/b", Content: []byte("b")}
	c := effect.RemoveLocal{Path: "/c"}
	two := &planned{step.Plan{Changes: []step.Change{{Summary: "one", Effects: []effect.Effect{a, b}}, {Summary: "two", Effects: []effect.Effect{c}}}}}
	var x recording
	if _, err := Run(context.Background(), []step.Phase{{Tag: step.TagVM, Steps: []step.Step{two}}}, Options{Exec: &x}, &events{}); err != nil {
		t.Fatal(err)
	}
	if want := [][]effect.Effect{{a, b, c}}; !reflect.DeepEqual(x.got, want) {
		t.Errorf("handed %v, want %v", x.got, want)
	}

	x.got = nil
	notYet := &planned{step.Plan{Changes: []step.Change{{Summary: "one", Effects: []effect.Effect{a}}, {Summary: "create it once the VM exists"}}}}
	_, err := Run(context.Background(), []step.Phase{{Tag: step.TagVM, Steps: []step.Step{notYet}}}, Options{Exec: &x}, &events{})
	var ny *step.NotYetError
	if !errors.As(err, &ny) || ny.Change.Summary != "create it once the VM exists" || len(x.got) != 0 {
		t.Errorf("err = %v, handed %v", err, x.got)
	}

	if _, err := Run(context.Background(), []step.Phase{{Tag: step.TagVM, Steps: []step.Step{two}}}, Options{}, &events{}); err == nil || !strings.Contains(err.Error(), "no executor") {
		t.Errorf("no executor: %v", err)
	}
}

func TestProgressEvents(t *testing.T) {
	w := steptest.NewWorld()
	ps := []step.Phase{{Tag: step.TagVM, Steps: []step.Step{
		&steptest.Action{StepID: "wait-ssh", HostName: "vm", W: w, Progress: []string{"waiting for SSH on 192.0.2.50:22"}},
	}}}
	var ev events
	if _, err := Run(context.Background(), ps, Options{Exec: w}, &ev); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, e := range ev {
		if e.Kind == StepProgress && e.Step == "wait-ssh" && e.Message == "waiting for SSH on 192.0.2.50:22" {
			found = true
		}
	}
	if !found {
		t.Errorf("no progress event: %+v", ev)
	}
}

// TestWaiter: the engine, not the step, decides between looking once and
// waiting. Check mode observes a step with nothing to change and reports a
// state not reached as a pending wait; a real run waits, and a wait is not
// a change; a step with changes applies them, then waits.
func TestWaiter(t *testing.T) {
	w := steptest.NewWorld()
	release := make(chan struct{})
	wait := &steptest.Wait{StepID: "node-ready", HostName: "vm", Path: "/node", Want: "Ready", W: w, Release: release}
	ps := func(s ...step.Step) []step.Phase { return []step.Phase{{Tag: step.TagK3s, Steps: s}} }

	var ev events
	res, err := Run(context.Background(), ps(wait), Options{Check: true}, &ev)
	if err != nil {
		t.Fatal(err)
	}
	end := ev[len(ev)-2]
	if end.Outcome != step.Changed || len(end.Changes) != 1 || end.Changes[0].Action != step.Wait || end.Changes[0].Summary != "wait: /node is , not Ready" || res.Pending != 1 {
		t.Errorf("check mode: %+v", end)
	}
	if wait.Observed != 1 || wait.Waited != 0 {
		t.Errorf("check mode observed %d times and waited %d times", wait.Observed, wait.Waited)
	}

	// A real run waits; the state arrives while it does.
	go func() {
		w.Set("/node", "Ready")
		close(release)
	}()
	ev = nil
	if _, err := Run(context.Background(), ps(wait), Options{Exec: w}, &ev); err != nil {
		t.Fatal(err)
	}
	if got := ev.ends(); !reflect.DeepEqual(got, []string{"k3s/node-ready=ok"}) || wait.Waited != 1 || !wait.HadDeadline {
		t.Errorf("apply: %v, waited %d, deadline %v", got, wait.Waited, wait.HadDeadline)
	}

	// A wait that fails fails its step, with what it last saw.
	w2 := steptest.NewWorld()
	done := make(chan struct{})
	close(done)
	never := &steptest.Wait{StepID: "node-ready", HostName: "vm", Path: "/node", Want: "Ready", W: w2, Release: done}
	ev = nil
	_, err = Run(context.Background(), ps(never), Options{Exec: w}, &ev)
	var se *StepError
	if !errors.As(err, &se) || se.Step != "node-ready" || !strings.Contains(err.Error(), "still waiting: /node is , not Ready") {
		t.Errorf("failed wait: %v", err)
	}

	// Every wait ends at its bound: one never released fails then, with
	// what it last saw.
	forever := &steptest.Wait{StepID: "node-ready", HostName: "vm", Path: "/node", Want: "Ready", W: steptest.NewWorld(),
		Release: make(chan struct{}), Timeout: 20 * time.Millisecond}
	_, err = Run(context.Background(), ps(forever), Options{Exec: w}, &events{})
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "gave up after 20ms: still waiting: /node is , not Ready") || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("bounded wait: %v", err)
	}
	// A waiter that names its bound itself (a step.TimeoutError) is left
	// as it is, its chain kept.
	own := &steptest.Wait{StepID: "node-ready", HostName: "vm", Path: "/node", Want: "Ready", W: steptest.NewWorld(),
		Release: make(chan struct{}), Timeout: 20 * time.Millisecond, OwnTimeout: true}
	_, err = Run(context.Background(), ps(own), Options{Exec: w}, &events{})
	var te *step.TimeoutError
	if !errors.As(err, &te) || strings.Contains(err.Error(), "gave up") || !strings.Contains(err.Error(), "Ready not reached after 20ms: /node is , not Ready") || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a waiter's own timeout: %v", err)
	}
	// A wait whose host's connection is given up ends then, with that
	// error, not at its bound; another host's loss leaves it alone.
	LostPoll = 5 * time.Millisecond
	gone := errors.New("lost the connection to vm")
	var asked atomic.Int32
	lost := func(host string) error {
		if host == "vm" && asked.Add(1) > 3 {
			return gone
		}
		return nil
	}
	cut := &steptest.Wait{StepID: "node-ready", HostName: "vm", Path: "/node", Want: "Ready", W: steptest.NewWorld(),
		Release: make(chan struct{}), Timeout: time.Minute}
	start := time.Now()
	_, err = Run(context.Background(), ps(cut), Options{Exec: w, Lost: lost}, &events{})
	if !errors.As(err, &se) || !errors.Is(err, gone) || time.Since(start) > 10*time.Second {
		t.Errorf("a wait on a lost host: %v after %v", err, time.Since(start))
	}
	other := &steptest.Wait{StepID: "node-ready", HostName: "other", Path: "/node", Want: "Ready", W: steptest.NewWorld(),
		Release: make(chan struct{}), Timeout: 50 * time.Millisecond}
	_, err = Run(context.Background(), ps(other), Options{Exec: w, Lost: lost}, &events{})
	if errors.Is(err, gone) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a wait on a host still there: %v", err)
	}

	// A waiter without a bound is refused, not waited for forever.
	unbounded := &steptest.Wait{StepID: "node-ready", HostName: "vm", Path: "/node", Want: "Ready", W: steptest.NewWorld(),
		Release: make(chan struct{}), Timeout: -1}
	_, err = Run(context.Background(), ps(unbounded), Options{Exec: w}, &events{})
	if err == nil || !strings.Contains(err.Error(), "no bound") || unbounded.Waited != 0 {
		t.Errorf("unbounded wait: %v (waited %d)", err, unbounded.Waited)
	}

	// Changes first, then the wait: the step changed, and was waited for.
	w3 := steptest.NewWorld()
	write := &steptest.File{StepID: "node", HostName: "vm", Path: "/node", Content: "Ready", W: w3}
	both := &steptest.Wait{StepID: "node-ready", HostName: "vm", Path: "/node", Want: "Ready", W: w3, Release: done}
	ev = nil
	if _, err := Run(context.Background(), ps(write, both), Options{Exec: w3}, &ev); err != nil {
		t.Fatal(err)
	}
	if got := ev.ends(); !reflect.DeepEqual(got, []string{"k3s/node=changed", "k3s/node-ready=ok"}) || both.Waited != 1 || both.Observed != 1 {
		t.Errorf("changes then wait: %v (waited %d, observed %d)", got, both.Waited, both.Observed)
	}
}

// TestListedPlansAreWhatRuns: a run given the plans a check listed carries
// out those; a step whose plan is no longer the listed one fails before it
// changes anything.
func TestListedPlansAreWhatRuns(t *testing.T) {
	w := steptest.NewWorld()
	ps := phases(w)
	listed := &Listed{}
	if _, err := Run(context.Background(), ps, Options{Check: true, Tags: []step.Tag{step.TagVM}}, listed); err != nil {
		t.Fatal(err)
	}
	if len(listed.Changes()) != 2 {
		t.Fatalf("listed %+v", listed.Changes())
	}
	// The world moves after the list: the second step's plan differs.
	w.Files["/vm"] = "vm 109"
	_, err := Run(context.Background(), ps, Options{Exec: w, Listed: listed, Tags: []step.Tag{step.TagVM}}, &events{})
	var pc *PlanChangedError
	if !errors.As(err, &pc) || !strings.Contains(err.Error(), "listed [create /vm: create /vm") || !strings.Contains(err.Error(), "now [update /vm: update /vm") {
		t.Fatalf("changed plan: %v", err)
	}
	if got := w.Mutations(); len(got) != 1 || got[0] != "write /img" {
		t.Errorf("mutations %v: the changed step must not run", got)
	}
	again := &Listed{}
	if _, err := Run(context.Background(), ps, Options{Check: true, Tags: []step.Tag{step.TagVM}}, again); err != nil {
		t.Fatal(err)
	}
	if d := listed.Diff(again); !strings.Contains(d, "vm/image on pve: listed [create /img") || !strings.Contains(d, "now nothing") {
		t.Errorf("diff: %q", d)
	}
}

// TestListedStepsOfOneIDOnOneHost: steps that share an ID and a host (the
// laptop's known_hosts entry of each server) are matched to their listed
// plans in run order.
func TestListedStepsOfOneIDOnOneHost(t *testing.T) {
	w := steptest.NewWorld()
	w.Set("/kh/a", "key a")
	w.Set("/kh/b", "key b")
	ps := []step.Phase{{Tag: step.TagDestroy, Steps: []step.Step{
		&steptest.File{StepID: "vm-host-key", HostName: "laptop", Path: "/kh/a", Content: "", W: w},
		&steptest.File{StepID: "vm-host-key", HostName: "laptop", Path: "/kh/b", Content: "", W: w},
	}}}
	listed := &Listed{}
	if _, err := Run(context.Background(), ps, Options{Check: true}, listed); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), ps, Options{Exec: w, Listed: listed}, &events{}); err != nil {
		t.Fatalf("run of the listed plans: %v", err)
	}
	if got := w.Mutations(); !reflect.DeepEqual(got, []string{"write /kh/a", "write /kh/b"}) {
		t.Errorf("mutations %v", got)
	}
}

// conditional is a File step that belongs to the run only when applies
// says so.
type conditional struct {
	*steptest.File
	applies bool
	err     error
}

func (c conditional) Applies(context.Context) (bool, error) { return c.applies, c.err }

// TestConditional: a step that does not apply is not in the run (no
// event, nothing counted, its Check not run); one that does runs as any
// step; an error deciding fails it as a Check error does.
func TestConditional(t *testing.T) {
	w := steptest.NewWorld()
	ps := phases(w)
	backup := &steptest.File{StepID: "backup-first", HostName: "vm", Path: "/backup", Content: "b", W: w}
	ps[1].Steps = append([]step.Step{conditional{File: backup}}, ps[1].Steps...)
	var ev events
	res, err := Run(context.Background(), ps, Options{Exec: w}, &ev)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ev {
		if e.Step == "backup-first" {
			t.Errorf("a step that does not apply shows: %+v", e)
		}
	}
	if _, ok := w.Files["/backup"]; ok || res.Recap.Total.Skipped != 0 {
		t.Errorf("it ran or was counted: %+v", res.Recap.Total)
	}

	ps[1].Steps[0] = conditional{File: backup, applies: true}
	ev = nil
	if _, err := Run(context.Background(), ps, Options{Exec: w}, &ev); err != nil || w.Files["/backup"] != "b" {
		t.Errorf("a step that applies: %v, %q", err, w.Files["/backup"])
	}

	ps[1].Steps[0] = conditional{File: backup, err: errors.New("etcd member s3 unhealthy")}
	_, err = Run(context.Background(), ps, Options{Exec: w}, &events{})
	if err == nil || !strings.Contains(err.Error(), "k3s/backup-first on vm: check: etcd member s3 unhealthy") {
		t.Errorf("deciding failed: %v", err)
	}
}

// ahead is an independent step whose Check counts its calls and, with
// gate, waits until every step sharing it has started its Check.
type ahead struct {
	id     string
	checks atomic.Int32
	gate   *sync.WaitGroup
	plan   func(n int32) step.Plan
}

func (s *ahead) ID() string   { return s.id }
func (s *ahead) Host() string { return "h" }
func (s *ahead) Independent() {}
func (s *ahead) Check(context.Context) (step.Plan, error) {
	n := s.checks.Add(1)
	if s.gate != nil && n == 1 {
		s.gate.Done()
		s.gate.Wait()
	}
	return s.plan(n), nil
}

// runWithin runs steps as one phase with an executor and fails t, saying
// stuck, unless the run ends within 10 s: a Check that waits for another
// one never returns.
func runWithin(t *testing.T, stuck string, steps []step.Step, l Listener) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), []step.Phase{{Tag: step.TagK3s, Steps: steps}}, Options{Exec: &recording{}}, l)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal(stuck)
	}
}

// TestIndependentStepsAreCheckedAhead: independent steps are checked side
// by side as the phase starts (each Check here waits for the others to
// start: one after another they would never return), and a plan checked
// ahead is used in its turn while nothing was carried out; after a
// change, a later step is checked again and that plan is the one carried
// out. Events stay in the phases' order.
func TestIndependentStepsAreCheckedAhead(t *testing.T) {
	none := func(int32) step.Plan { return step.Plan{Note: "as configured"} }
	var gate sync.WaitGroup
	gate.Add(3)
	a, b, c := &ahead{id: "a", gate: &gate, plan: none}, &ahead{id: "b", gate: &gate, plan: none}, &ahead{id: "c", gate: &gate, plan: none}
	var ev events
	runWithin(t, "the independent steps were not checked side by side", []step.Step{a, b, c}, &ev)
	if got := strings.Join(ev.ends(), " "); got != "k3s/a=ok k3s/b=ok k3s/c=ok" {
		t.Errorf("events: %s", got)
	}
	for _, s := range []*ahead{a, b, c} {
		if n := s.checks.Load(); n != 1 {
			t.Errorf("%s checked %d times on a run that changed nothing", s.id, n)
		}
	}

	// A change first: the later step's plan is checked again, after it.
	run := effect.Run{Host: "h", Cmd: remote.Command("fix")}
	changes := &planned{step.Plan{Changes: []step.Change{{Summary: "fix", Effects: []effect.Effect{run}}}}}
	later := &ahead{id: "later", plan: func(n int32) step.Plan {
		if n == 1 {
			return step.Plan{Changes: []step.Change{{Summary: "stale", Effects: []effect.Effect{run}}}}
		}
		return step.Plan{Note: "as configured since the fix"}
	}}
	var x recording
	if _, err := Run(context.Background(), []step.Phase{{Tag: step.TagK3s, Steps: []step.Step{changes, later}}}, Options{Exec: &x}, &events{}); err != nil {
		t.Fatal(err)
	}
	if n := later.checks.Load(); n != 2 || len(x.got) != 1 {
		t.Errorf("after a change: checked %d times, carried out %v", n, x.got)
	}
}

// blocking is an independent step whose Check, run ahead, reads until
// its context ends (a quorum gate waiting on an etcd member), and is as
// configured when checked at its turn.
type blocking struct {
	checks    atomic.Int32
	cancelled atomic.Bool
}

func (s *blocking) ID() string   { return "blocking" }
func (s *blocking) Host() string { return "h" }
func (s *blocking) Independent() {}
func (s *blocking) Check(ctx context.Context) (step.Plan, error) {
	if s.checks.Add(1) == 1 {
		<-ctx.Done()
		s.cancelled.Store(true)
		return step.Plan{}, ctx.Err()
	}
	return step.Plan{Note: "as configured"}, nil
}

// TestAheadChecksDecideAtTheirTurn: a change does not wait out a Check
// still reading ahead: it cancels it, and that step checks again at its
// turn. A plan with changes checked ahead is checked again at its turn
// even when nothing was carried out meanwhile (what it decided, a quorum
// gate among it, may no longer hold): the plan carried out is the one
// checked then. A check run keeps the plan checked ahead: it carries
// nothing out.
func TestAheadChecksDecideAtTheirTurn(t *testing.T) {
	run := effect.Run{Host: "h", Cmd: remote.Command("fix")}
	change := &planned{step.Plan{Changes: []step.Change{{Summary: "fix", Effects: []effect.Effect{run}}}}}
	slow := &blocking{}
	runWithin(t, "the change waited for a Check running ahead instead of cancelling it", []step.Step{change, slow}, &events{})
	if !slow.cancelled.Load() || slow.checks.Load() != 2 {
		t.Errorf("the Check ahead: cancelled %v, checked %d times (want cancelled, then checked at its turn)", slow.cancelled.Load(), slow.checks.Load())
	}

	stale := effect.Run{Host: "h", Cmd: remote.Command("restart, as the gate allowed when the phase started")}
	now := effect.Run{Host: "h", Cmd: remote.Command("restart, as the gate allows now")}
	gated := func() *ahead {
		return &ahead{id: "gated", plan: func(n int32) step.Plan {
			e := now
			if n == 1 {
				e = stale
			}
			return step.Plan{Changes: []step.Change{{Summary: "restart", Effects: []effect.Effect{e}}}}
		}}
	}
	g := gated()
	var x recording
	if _, err := Run(context.Background(), []step.Phase{{Tag: step.TagK3s, Steps: []step.Step{g}}}, Options{Exec: &x}, &events{}); err != nil {
		t.Fatal(err)
	}
	if n := g.checks.Load(); n != 2 || len(x.got) != 1 || !reflect.DeepEqual(x.got[0], []effect.Effect{now}) {
		t.Errorf("a change checked ahead: checked %d times, carried out %v (want the plan checked at its turn)", n, x.got)
	}
	g = gated()
	if _, err := Run(context.Background(), []step.Phase{{Tag: step.TagK3s, Steps: []step.Step{g}}}, Options{Check: true}, &events{}); err != nil {
		t.Fatal(err)
	}
	if n := g.checks.Load(); n != 1 {
		t.Errorf("a check run checked a pending change %d times, want once", n)
	}
}

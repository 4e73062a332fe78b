package labtest

import (
	"flag"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Costs is how long each top-level test of the package took in the last
// measured run (seconds, docs/testing/), set by the package's TestMain;
// a test not there counts as defaultCost.
//
// Why: go test starts a package's parallel tests in no set order (they
// all wait on their parent's barrier, then race for -parallel's
// semaphore), so the longest test of the suite could start last and run
// alone at its end: on 2 cores, with 2 labs at a time, TestHARestore
// (about 9 minutes) started 23 minutes into a 32-minute run. Lab slots
// are handed out longest first instead (the LPT rule of scheduling),
// which ends a run of many short tests and a few long ones near its
// average.
var Costs map[string]float64

const defaultCost = 60

// slotsEnv is how many labs of a test binary may run at once (make
// test sets it from PARALLEL and lifts go test's own -parallel above it,
// so that this queue, not go test's, decides the order). Without it, the
// queue takes go test's -parallel.
const slotsEnv = "MGMTCTL_LAB_SLOTS"

// settle is how long the queue waits, after the first test asks, for
// the others released with it to ask too, before it hands out any slot.
const settle = 500 * time.Millisecond

type waiter struct {
	cost float64
	name string
	run  chan struct{}
}

// queue hands out a test binary's lab slots, the costliest waiting test
// first, once ready (settled).
type queue struct {
	mu      sync.Mutex
	free    int
	ready   bool
	waiting []*waiter
	held    map[string]int // top-level test: its holds
}

func newQueue(n int) *queue { return &queue{free: n, held: map[string]int{}} }

var (
	slotsOnce sync.Once
	slots     *queue
)

func slotCount() int {
	if n, err := strconv.Atoi(os.Getenv(slotsEnv)); err == nil && n > 0 {
		return n
	}
	if f := flag.Lookup("test.parallel"); f != nil {
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n > 0 {
			return n
		}
	}
	return 1
}

// holdSlot blocks until t's top-level test may run a lab, and holds the
// slot until that test ends. A test (or a subtest of one) that holds a
// slot already takes no other: its labs run one after another.
func holdSlot(t testing.TB) {
	slotsOnce.Do(func() {
		slots = newQueue(slotCount())
		time.AfterFunc(settle, slots.settle)
	})
	name, _, _ := strings.Cut(t.Name(), "/")
	cost, ok := Costs[name]
	if !ok {
		cost = defaultCost
	}
	t.Cleanup(slots.hold(name, cost))
}

// hold blocks until name holds a slot (at once if it holds one already)
// and returns what gives this hold back.
func (q *queue) hold(name string, cost float64) (release func()) {
	release = func() { q.release(name) }
	q.mu.Lock()
	if q.held[name] > 0 {
		q.held[name]++
		q.mu.Unlock()
		return release
	}
	w := &waiter{cost: cost, name: name, run: make(chan struct{})}
	q.waiting = append(q.waiting, w)
	q.dispatch()
	q.mu.Unlock()
	<-w.run
	return release
}

// settle starts handing slots out.
func (q *queue) settle() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ready = true
	q.dispatch()
}

// dispatch hands free slots to the waiting tests, the costliest first.
// It runs with q.mu held.
func (q *queue) dispatch() {
	if !q.ready {
		return
	}
	sort.SliceStable(q.waiting, func(i, j int) bool { return q.waiting[i].cost > q.waiting[j].cost })
	for q.free > 0 && len(q.waiting) > 0 {
		w := q.waiting[0]
		q.waiting = q.waiting[1:]
		q.free--
		q.held[w.name]++
		close(w.run)
	}
}

func (q *queue) release(name string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.held[name]--
	if q.held[name] == 0 {
		delete(q.held, name)
		q.free++
		q.dispatch()
	}
}

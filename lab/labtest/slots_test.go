package labtest

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// TestQueueLongestFirst: tests asking before the queue settles get their
// slots costliest first, one at a time with one slot; a test that holds a
// slot takes no second one; the slot goes to the next once given back.
func TestQueueLongestFirst(t *testing.T) {
	q := newQueue(1)
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	for _, c := range []struct {
		name string
		cost float64
	}{{"TestShort", 10}, {"TestLong", 300}, {"TestMiddle", 60}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release := q.hold(c.name, c.cost)
			mu.Lock()
			order = append(order, c.name)
			mu.Unlock()
			// Its subtest's lab: no second slot (with one slot, a second
			// would never come).
			q.hold(c.name, c.cost)()
			release()
		}()
	}
	// Every test waits before the queue settles.
	for {
		q.mu.Lock()
		n := len(q.waiting)
		q.mu.Unlock()
		if n == 3 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	q.settle()
	wg.Wait()
	if want := []string{"TestLong", "TestMiddle", "TestShort"}; !slices.Equal(order, want) {
		t.Errorf("slots went to %v, want %v", order, want)
	}
	if q.free != 1 || len(q.held) != 0 {
		t.Errorf("after every release: %d free, held %v", q.free, q.held)
	}
}

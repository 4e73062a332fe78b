package ui

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/step"
)

// DefaultHeartbeat is how often a running step gets a line on a
// non-terminal (CI logs, `| tee`), where no spinner shows it is alive.
const DefaultHeartbeat = 10 * time.Second

// heartbeat is the spinner's counterpart where nothing can be redrawn: while
// a step runs, every interval a line with the step, the elapsed time and
// what it last reported (what it waits for, what it last saw). Like the
// spinner, it only reports; it never decides when a wait is over.
type heartbeat struct {
	w        io.Writer
	mu       *sync.Mutex // the view's lock, held while writing
	name     string
	start    time.Time
	interval time.Duration
	msg      string
	done     chan struct{}
	wg       sync.WaitGroup
}

func startHeartbeat(w io.Writer, mu *sync.Mutex, phase step.Tag, id string, start time.Time, interval time.Duration) *heartbeat {
	h := &heartbeat{w: w, mu: mu, name: string(phase) + "/" + id, start: start, interval: interval, done: make(chan struct{})}
	h.wg.Add(1)
	go h.run()
	return h
}

func (h *heartbeat) run() {
	defer h.wg.Done()
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-t.C:
			h.mu.Lock()
			line := fmt.Sprintf("  ... %s: still running (%s)", h.name, time.Since(h.start).Round(time.Second))
			if h.msg != "" {
				line += ", last: " + h.msg
			}
			fmt.Fprintln(h.w, line)
			h.mu.Unlock()
		}
	}
}

// message records the step's latest progress report; the caller holds mu.
func (h *heartbeat) message(m string) { h.msg = m }

// stop ends the heartbeat; the caller holds mu, which the goroutine needs,
// so it is released while waiting.
func (h *heartbeat) stop() {
	close(h.done)
	h.mu.Unlock()
	h.wg.Wait()
	h.mu.Lock()
}

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

var frames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// live shows that a running step is alive, every interval: on a terminal
// a spinner redraws one status line with the elapsed time and the step's
// last progress report; elsewhere (the heartbeat) a line is printed with
// the same. It only reports; it never decides when a wait is over.
type live struct {
	w        io.Writer
	mu       *sync.Mutex // the view's lock, held while drawing
	name     string
	start    time.Time
	interval time.Duration
	terminal bool
	msg      string
	done     chan struct{}
	wg       sync.WaitGroup
}

func startLive(w io.Writer, mu *sync.Mutex, phase step.Tag, id string, start time.Time, terminal bool, interval time.Duration) *live {
	l := &live{w: w, mu: mu, name: string(phase) + "/" + id, start: start, interval: interval, terminal: terminal, done: make(chan struct{})}
	if terminal {
		l.interval = 120 * time.Millisecond
	}
	l.wg.Add(1)
	go l.run()
	return l
}

func (l *live) run() {
	defer l.wg.Done()
	tick := time.NewTicker(l.interval)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-l.done:
			return
		case <-tick.C:
			l.mu.Lock()
			elapsed := time.Since(l.start).Round(time.Second)
			if l.terminal {
				line := fmt.Sprintf("%s %s (%s)", frames[i%len(frames)], l.name, elapsed)
				if l.msg != "" {
					line += " " + l.msg
				}
				fmt.Fprintf(l.w, "\r\033[K%s", line)
			} else {
				line := fmt.Sprintf("  ... %s: still running (%s)", l.name, elapsed)
				if l.msg != "" {
					line += ", last: " + l.msg
				}
				fmt.Fprintln(l.w, line)
			}
			l.mu.Unlock()
		}
	}
}

// message records the step's latest progress report; the caller holds mu.
func (l *live) message(m string) { l.msg = m }

// stop ends it, clearing a spinner's line; the caller holds mu, which the
// drawing goroutine needs, so it is released while waiting.
func (l *live) stop() {
	close(l.done)
	l.mu.Unlock()
	l.wg.Wait()
	l.mu.Lock()
	if l.terminal {
		fmt.Fprint(l.w, "\r\033[K")
	}
}

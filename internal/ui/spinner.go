package ui

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/step"
)

var frames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// spinner redraws one status line with the elapsed time while a step runs.
// It only animates; it never decides when a wait is over.
type spinner struct {
	w     io.Writer
	mu    *sync.Mutex // the view's lock, held while drawing
	name  string
	start time.Time
	msg   string
	done  chan struct{}
	wg    sync.WaitGroup
}

func startSpinner(w io.Writer, mu *sync.Mutex, phase step.Tag, id string, start time.Time) *spinner {
	s := &spinner{w: w, mu: mu, name: string(phase) + "/" + id, start: start, done: make(chan struct{})}
	s.wg.Add(1)
	go s.run()
	return s
}

func (s *spinner) run() {
	defer s.wg.Done()
	tick := time.NewTicker(120 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-s.done:
			return
		case <-tick.C:
			s.mu.Lock()
			line := fmt.Sprintf("%s %s (%s)", frames[i%len(frames)], s.name, time.Since(s.start).Round(time.Second))
			if s.msg != "" {
				line += " " + s.msg
			}
			fmt.Fprintf(s.w, "\r\033[K%s", line)
			s.mu.Unlock()
		}
	}
}

// message changes the text after the elapsed time; the caller holds mu.
func (s *spinner) message(m string) { s.msg = m }

// stop ends the animation and clears the line; the caller holds mu, which
// the drawing goroutine needs, so it is released while waiting.
func (s *spinner) stop() {
	close(s.done)
	s.mu.Unlock()
	s.wg.Wait()
	s.mu.Lock()
	fmt.Fprint(s.w, "\r\033[K")
}

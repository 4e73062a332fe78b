package engine

import (
	"sort"

	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Counts are the outcomes of the steps on one host, or of a whole run.
type Counts struct {
	OK      int `json:"ok"`
	Changed int `json:"changed"`
	Failed  int `json:"failed"`
	Skipped int `json:"skipped"`
}

func (c *Counts) add(o step.Outcome) {
	switch o {
	case step.OK:
		c.OK++
	case step.Changed:
		c.Changed++
	case step.Failed:
		c.Failed++
	case step.Skipped:
		c.Skipped++
	}
}

// Recap is a listener that only counts step outcomes, per host and in all.
type Recap struct {
	Total Counts
	Hosts map[string]*Counts
}

// NewRecap returns an empty recap.
func NewRecap() *Recap { return &Recap{Hosts: map[string]*Counts{}} }

// Event implements Listener.
func (r *Recap) Event(e Event) {
	if e.Kind != StepEnd {
		return
	}
	h := r.Hosts[e.Host]
	if h == nil {
		h = &Counts{}
		r.Hosts[e.Host] = h
	}
	h.add(e.Outcome)
	r.Total.add(e.Outcome)
}

// HostNames returns the hosts in a stable order.
func (r *Recap) HostNames() []string {
	names := make([]string, 0, len(r.Hosts))
	for h := range r.Hosts {
		names = append(names, h)
	}
	sort.Strings(names)
	return names
}

var _ Listener = (*Recap)(nil)

// Package upgrade is `mgmtctl upgrade plan`'s report: for each component
// the version running, the version pinned, the newest of the pin's line,
// and what apply will do about it; the order apply takes them in; what a
// k3s bump does; the providers' contracts. It renders the report as a
// table or JSON; package phase gathers it.
package upgrade

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/mgmtctl/mgmtctl/internal/version"
)

// Actions apply takes on a component.
const (
	None    = "none"
	Install = "install"
	Upgrade = "upgrade"
	Refused = "refused"
)

// Component is one row of the plan.
type Component struct {
	Name    string `json:"name"`
	Running string `json:"running"` // "" when not there yet
	Pinned  string `json:"pinned"`
	// Newest is the newest release of the pin's line (same major and
	// minor); "" when it could not be looked up (Why says why).
	Newest string `json:"newest,omitempty"`
	Action string `json:"action"`
	// Note says more: why an action is refused, where newest could not be
	// read, what a change does.
	Note string `json:"note,omitempty"`
}

// Plan is the whole report.
type Plan struct {
	Components []Component `json:"components"`
	// Order is the order apply takes the changes in, each a sentence.
	Order []string `json:"order"`
	// K3s says what a k3s bump does on this cluster.
	K3s string `json:"k3s"`
	// Contracts is each provider's contract, and Problems what does not
	// agree (none: the set is installable).
	Contracts []string `json:"contracts"`
	Problems  []string `json:"problems,omitempty"`
}

// Changes counts the components apply would change.
func (p Plan) Changes() int {
	n := 0
	for _, c := range p.Components {
		if c.Action != None {
			n++
		}
	}
	return n
}

// Refusals counts what apply would refuse: a component, or the contracts.
func (p Plan) Refusals() int {
	n := len(p.Problems)
	for _, c := range p.Components {
		if c.Action == Refused {
			n++
		}
	}
	return n
}

// WriteJSON writes the plan as one JSON document.
func WriteJSON(w io.Writer, p Plan) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(p)
}

// WriteText writes the plan as a table and the sentences below it.
func WriteText(w io.Writer, p Plan) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tRUNNING\tPINNED\tNEWEST IN LINE\tACTION")
	for _, c := range p.Components {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Name, or(c.Running, "-"), c.Pinned, or(c.Newest, "?"), c.Action)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var notes []string
	for _, c := range p.Components {
		if c.Note != "" {
			notes = append(notes, fmt.Sprintf("  %s: %s", c.Name, c.Note))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\nnotes:\n%s\n", strings.Join(notes, "\n"))
	}
	if len(p.Order) > 0 {
		fmt.Fprintf(w, "\napply will, in this order:\n")
		for i, o := range p.Order {
			fmt.Fprintf(w, "  %d. %s\n", i+1, o)
		}
	} else {
		fmt.Fprintf(w, "\napply will change nothing: every component runs its pin\n")
	}
	fmt.Fprintf(w, "\nk3s: %s\n", p.K3s)
	fmt.Fprintf(w, "contracts: %s\n", strings.Join(p.Contracts, ", "))
	for _, pr := range p.Problems {
		fmt.Fprintf(w, "  refused: %s\n", pr)
	}
	return nil
}

func or(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// NewestInLine is the highest of versions in the pinned version's line
// (same major and minor; pre-releases, with a "-" after the patch, left
// out), "" when none.
func NewestInLine(pinned string, versions []string) string {
	line, ok := version.Line(pinned)
	if !ok {
		return ""
	}
	best := ""
	for _, v := range versions {
		l, ok := version.Line(v)
		if !ok || l != line || strings.Contains(strings.SplitN(strings.TrimPrefix(v, "v"), "+", 2)[0], "-") {
			continue
		}
		if best == "" || version.Less(best, v) {
			best = v
		}
	}
	return best
}

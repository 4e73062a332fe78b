// Package redact removes secret values from text before it reaches any
// output: terminal lines, JSON events, diffs, error messages and the debug log.
//
// Secrets are registered once, when they are loaded; everything that prints
// goes through the same Redactor, so a new output path cannot forget one.
package redact

import (
	"io"
	"sort"
	"strings"
	"sync"
)

// Mask is what a secret value is replaced with.
const Mask = "[REDACTED]"

// minLen keeps trivially short values (which would mangle ordinary text)
// out of the set; config validation refuses secrets this short anyway.
const minLen = 4

// Redactor replaces registered secret values. The zero value is ready to use
// and redacts nothing until Add is called. It is safe for concurrent use.
type Redactor struct {
	mu      sync.RWMutex
	secrets []string
	r       *strings.Replacer
}

// Add registers secret values. Empty and very short values are ignored.
func (x *Redactor) Add(values ...string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, v := range values {
		if len(v) < minLen {
			continue
		}
		x.secrets = append(x.secrets, v)
	}
	// Longest first, so a secret that contains another is masked whole.
	sort.Slice(x.secrets, func(i, j int) bool { return len(x.secrets[i]) > len(x.secrets[j]) })
	pairs := make([]string, 0, 2*len(x.secrets))
	for _, s := range x.secrets {
		pairs = append(pairs, s, Mask)
	}
	x.r = strings.NewReplacer(pairs...)
}

// String returns s with every registered secret masked.
func (x *Redactor) String(s string) string {
	if x == nil {
		return s
	}
	x.mu.RLock()
	r := x.r
	x.mu.RUnlock()
	if r == nil {
		return s
	}
	return r.Replace(s)
}

// Writer returns a writer that masks secrets in each Write before passing
// it on. Callers write whole lines or events, so a secret is never split
// across two writes.
func (x *Redactor) Writer(w io.Writer) io.Writer { return &writer{x: x, w: w} }

type writer struct {
	x *Redactor
	w io.Writer
}

func (w *writer) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.w, w.x.String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

package config

import (
	"fmt"
	"sort"
	"strings"
)

// FieldError is one thing wrong with one field of a config file.
type FieldError struct {
	File string
	Line int
	Path string // field path, e.g. spec.vm.id or spec.providers[1].version
	Msg  string
	// Got is the offending value as it may be printed; secrets never land
	// here (their errors describe the value instead).
	Got string
	// HasGot says whether Got should be printed: an empty string is a
	// meaningful "got" for a required field.
	HasGot bool
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.HasGot {
		fmt.Fprintf(&b, " (got %q)", e.Got)
	}
	return b.String()
}

// Errors is every problem found in a config, reported at once.
type Errors []*FieldError

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// sorted orders errors by file and line so the report reads top to bottom.
func (es Errors) sorted() Errors {
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].File != es[j].File {
			return es[i].File < es[j].File
		}
		return es[i].Line < es[j].Line
	})
	return es
}

// report collects errors for one file, resolving each field path to the
// line it was written on (or its nearest written parent's line).
type report struct {
	file  string
	lines map[string]int
	// set holds the paths the file gives a value (null is no value): only
	// the others get defaults, so a value written empty or zero is
	// validated as written, never replaced.
	set  map[string]bool
	errs Errors
}

func (r *report) line(path string) int {
	for p := path; p != ""; p = parent(p) {
		if l, ok := r.lines[p]; ok {
			return l
		}
	}
	return r.lines[""]
}

func parent(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// add records an error that shows the offending value.
func (r *report) add(path, got, format string, args ...any) {
	r.errs = append(r.errs, &FieldError{File: r.file, Line: r.line(path), Path: path, Msg: fmt.Sprintf(format, args...), Got: got, HasGot: true})
}

// addNoValue records an error without echoing the value (missing fields,
// secrets, values too long to be useful).
func (r *report) addNoValue(path, format string, args ...any) {
	r.errs = append(r.errs, &FieldError{File: r.file, Line: r.line(path), Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Command testtimes summarises the wall time of a test run from the events
// `go test -json` prints: one row per top-level test (its subtests are in
// its time) and one per package, slowest first. Given two runs it puts
// them side by side, so a change to the suite is measured, not guessed:
//
//	go test -json ./... > before.json     # on the old commit
//	go test -json ./... > after.json      # on the new one
//	go run ./hack/testtimes before.json after.json
//
// With -tsv it prints tab-separated rows (package, test, seconds, result)
// to keep beside docs/testing.md for a later comparison; a .tsv file is
// read back as a run too.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// event is the part of test2json's TestEvent this reads.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
}

// row is one finished test, or a package when Test is empty.
type row struct {
	Package, Test, Result string
	Seconds               float64
}

func (r row) key() string { return r.Package + " " + r.Test }

// run is every finished top-level test and package of one `go test -json`.
type run struct {
	rows  map[string]row
	order []string
}

func (r *run) add(x row) {
	if r.rows == nil {
		r.rows = map[string]row{}
	}
	if _, ok := r.rows[x.key()]; !ok {
		r.order = append(r.order, x.key())
	}
	r.rows[x.key()] = x
}

// parseJSON reads test2json events; lines that are not events (a build
// failure's output interleaved by `go test`) are skipped.
func parseJSON(in io.Reader) (*run, error) {
	out := &run{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			continue
		}
		switch e.Action {
		case "pass", "fail", "skip":
		default:
			continue
		}
		// Subtests are counted in their parent's time.
		if strings.Contains(e.Test, "/") {
			continue
		}
		out.add(row{Package: e.Package, Test: e.Test, Result: e.Action, Seconds: e.Elapsed})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out.rows) == 0 {
		return nil, errors.New("no finished test in it: was it written by go test -json?")
	}
	return out, nil
}

// parseTSV reads what -tsv wrote.
func parseTSV(in io.Reader) (*run, error) {
	out := &run{}
	sc := bufio.NewScanner(in)
	for n := 1; sc.Scan(); n++ {
		if n == 1 && strings.HasPrefix(sc.Text(), "package\t") {
			continue
		}
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("line %d: %d fields, want 4 (package, test, seconds, result)", n, len(f))
		}
		s, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: seconds: %w", n, err)
		}
		out.add(row{Package: f[0], Test: f[1], Seconds: s, Result: f[3]})
	}
	return out, sc.Err()
}

func load(path string) (*run, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r *run
	if strings.HasSuffix(path, ".tsv") {
		r, err = parseTSV(f)
	} else {
		r, err = parseJSON(f)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// sorted is the run's rows, slowest first (packages and tests apart:
// packages first), ties by name.
func (r *run) sorted() []row {
	rows := make([]row, 0, len(r.rows))
	for _, k := range r.order {
		rows = append(rows, r.rows[k])
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if (a.Test == "") != (b.Test == "") {
			return a.Test == ""
		}
		if a.Seconds != b.Seconds {
			return a.Seconds > b.Seconds
		}
		return a.key() < b.key()
	})
	return rows
}

// short drops the module path a package shares with the others.
func short(pkg string) string {
	if s, ok := strings.CutPrefix(pkg, "github.com/mgmtctl/mgmtctl/"); ok {
		return s
	}
	return pkg
}

func writeTSV(w io.Writer, r *run) {
	fmt.Fprintln(w, "package\ttest\tseconds\tresult")
	for _, x := range r.sorted() {
		fmt.Fprintf(w, "%s\t%s\t%.2f\t%s\n", x.Package, x.Test, x.Seconds, x.Result)
	}
}

// writeTable prints a Markdown table: one run, or two side by side
// (rows in the newer run's order, then those only the older has).
func writeTable(w io.Writer, runs []*run, top int) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	last := runs[len(runs)-1]
	if len(runs) == 1 {
		fmt.Fprintln(tw, "| package\t| test\t| s\t| result\t|")
		fmt.Fprintln(tw, "| ---\t| ---\t| ---:\t| ---\t|")
	} else {
		fmt.Fprintln(tw, "| package\t| test\t| before s\t| after s\t| result\t|")
		fmt.Fprintln(tw, "| ---\t| ---\t| ---:\t| ---:\t| ---\t|")
	}
	rows := last.sorted()
	if len(runs) == 2 {
		for _, x := range runs[0].sorted() {
			if _, ok := last.rows[x.key()]; !ok {
				rows = append(rows, row{Package: x.Package, Test: x.Test, Result: "(gone)", Seconds: -1})
			}
		}
	}
	tests := 0
	for _, x := range rows {
		if x.Test != "" {
			tests++
			if top > 0 && tests > top {
				continue
			}
		}
		name := x.Test
		if name == "" {
			name = "(package)"
		}
		cells := []string{short(x.Package), name}
		if len(runs) == 2 {
			before := "—"
			if b, ok := runs[0].rows[x.key()]; ok {
				before = fmt.Sprintf("%.1f", b.Seconds)
			}
			cells = append(cells, before)
		}
		now := "—"
		if x.Seconds >= 0 {
			now = fmt.Sprintf("%.1f", x.Seconds)
		}
		cells = append(cells, now, x.Result)
		fmt.Fprintln(tw, "| "+strings.Join(cells, "\t| ")+"\t|")
	}
	tw.Flush()
	for i, r := range runs {
		var pkgs, sum float64
		for _, x := range r.rows {
			if x.Test == "" {
				pkgs += x.Seconds
			} else {
				sum += x.Seconds
			}
		}
		label := "run"
		if len(runs) == 2 {
			label = []string{"before", "after"}[i]
		}
		fmt.Fprintf(w, "\n%s: packages %.0f s in all (they run side by side: `go test -p`), tests %.0f s in all (t.Parallel ones overlap)\n", label, pkgs, sum)
	}
}

func main() {
	tsv := flag.Bool("tsv", false, "print tab-separated rows (package, test, seconds, result) of the one run given")
	top := flag.Int("top", 0, "only the N slowest tests (packages all shown); 0: every test")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: testtimes [-tsv] [-top N] RUN.json|RUN.tsv [AFTER.json|AFTER.tsv]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 || flag.NArg() > 2 || (*tsv && flag.NArg() != 1) {
		flag.Usage()
		os.Exit(2)
	}
	var runs []*run
	for _, p := range flag.Args() {
		r, err := load(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testtimes:", err)
			os.Exit(1)
		}
		runs = append(runs, r)
	}
	if *tsv {
		writeTSV(os.Stdout, runs[0])
		return
	}
	writeTable(os.Stdout, runs, *top)
}

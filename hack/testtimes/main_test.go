package main

import (
	"bytes"
	"strings"
	"testing"
)

// A slice of what `go test -json` prints: a package's output, a test with
// a subtest, a skipped test, a build line that is not an event.
const sample = `{"Action":"start","Package":"github.com/mgmtctl/mgmtctl/lab/e2e"}
{"Action":"run","Package":"github.com/mgmtctl/mgmtctl/lab/e2e","Test":"TestFast"}
{"Action":"output","Package":"github.com/mgmtctl/mgmtctl/lab/e2e","Test":"TestFast","Output":"=== RUN   TestFast\n"}
{"Action":"pass","Package":"github.com/mgmtctl/mgmtctl/lab/e2e","Test":"TestFast","Elapsed":1.5}
{"Action":"run","Package":"github.com/mgmtctl/mgmtctl/lab/e2e","Test":"TestSlow"}
{"Action":"pass","Package":"github.com/mgmtctl/mgmtctl/lab/e2e","Test":"TestSlow/part","Elapsed":40}
{"Action":"fail","Package":"github.com/mgmtctl/mgmtctl/lab/e2e","Test":"TestSlow","Elapsed":42.25}
{"Action":"skip","Package":"github.com/mgmtctl/mgmtctl/lab/e2e","Test":"TestSkipped","Elapsed":0}
# github.com/mgmtctl/mgmtctl/lab/e2e [build]
{"Action":"fail","Package":"github.com/mgmtctl/mgmtctl/lab/e2e","Elapsed":44}
{"Action":"pass","Package":"github.com/mgmtctl/mgmtctl/internal/unit","Elapsed":0.3}
`

func TestParseJSON(t *testing.T) {
	r, err := parseJSON(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range r.sorted() {
		got = append(got, x.Package+"|"+x.Test+"|"+x.Result)
	}
	want := []string{
		"github.com/mgmtctl/mgmtctl/lab/e2e||fail", "github.com/mgmtctl/mgmtctl/internal/unit||pass",
		"github.com/mgmtctl/mgmtctl/lab/e2e|TestSlow|fail", "github.com/mgmtctl/mgmtctl/lab/e2e|TestFast|pass", "github.com/mgmtctl/mgmtctl/lab/e2e|TestSkipped|skip",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if s := r.rows["github.com/mgmtctl/mgmtctl/lab/e2e TestSlow"].Seconds; s != 42.25 {
		t.Errorf("TestSlow: %v s, want its own elapsed, not its subtest's", s)
	}
}

func TestParseRefusesWhatIsNotARun(t *testing.T) {
	for name, in := range map[string]string{"empty": "", "plain output": "ok  \texample.com/m\t0.1s\n"} {
		t.Run(name, func(t *testing.T) {
			if _, err := parseJSON(strings.NewReader(in)); err == nil {
				t.Error("no error")
			}
		})
	}
	if _, err := parseTSV(strings.NewReader("package\ttest\tseconds\tresult\na\tb\tnot-a-number\tpass\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a bad seconds field: %v", err)
	}
}

// The TSV written is read back as the same run, and two runs compare row
// by row, a test gone from the newer one included.
func TestTSVRoundTripAndCompare(t *testing.T) {
	before, err := parseJSON(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	var tsv bytes.Buffer
	writeTSV(&tsv, before)
	back, err := parseTSV(&tsv)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.rows) != len(before.rows) || back.rows["github.com/mgmtctl/mgmtctl/lab/e2e TestSlow"].Seconds != 42.25 {
		t.Fatalf("round trip: %+v", back.rows)
	}
	after, err := parseJSON(strings.NewReader(strings.ReplaceAll(strings.ReplaceAll(sample, `"Elapsed":42.25`, `"Elapsed":12`), "TestFast", "TestRenamed")))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	writeTable(&out, []*run{back, after}, 0)
	for _, want := range []string{"| lab/e2e ", "| TestSlow ", "| 42.2 ", "| 12.0 ", "| TestFast ", "(gone)", "before: packages 44 s", "after: packages 44 s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

package labtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// notStandIns are the lab's packages that stand in for no upstream: the
// lab's own machinery, or upstream's code run as it is. Every other
// package under lab/internal is a stand-in and must have its row in
// docs/upstream.md §6, which names it as `lab/internal/<package>`.
var notStandIns = map[string]string{
	"charts":   "packages upstream's own Helm charts from their Go modules",
	"fixtures": "lays out upstream's own files",
	"host":     "the agent that makes a network namespace a lab host",
	"lab":      "brings the lab up and down",
	"netns":    "the lab's network namespaces",
	"pki":      "the lab's certificate authority",
	"s3":       "runs upstream's versitygw",
	"simkube":  "helpers the stand-ins share",
}

// TestEveryStandInHasItsRow: docs/upstream.md §6 lists every stand-in the
// lab has (#54); a new package under lab/internal fails this until it has
// its row there or its reason here.
func TestEveryStandInHasItsRow(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(thisDir(), "..", "..", "docs", "upstream.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## 6. ")
	if !ok {
		t.Fatal("docs/upstream.md has no section 6")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	dirs, err := os.ReadDir(filepath.Join(thisDir(), "..", "internal"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		if _, ok := notStandIns[d.Name()]; ok {
			if strings.Contains(section, "`lab/internal/"+d.Name()) {
				t.Errorf("lab/internal/%s has a row in §6 and a reason in notStandIns: which is it?", d.Name())
			}
			continue
		}
		if !strings.Contains(section, "`lab/internal/"+d.Name()) {
			t.Errorf("lab/internal/%s is a stand-in with no row in docs/upstream.md §6 (name it as `lab/internal/%s`), or add it to notStandIns with why it is none", d.Name(), d.Name())
		}
	}
}

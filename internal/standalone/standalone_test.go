package standalone

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// outside are references to the team's reference folder, which sits
// beside our own checkouts and nowhere else.
var outside = regexp.MustCompile(`shared/|upstream-facts`)

// relative is a relative path going up, at the start of a token (not
// inside an absolute path such as /var/lib/../etc).
var relative = regexp.MustCompile(`(?:^|[^\w./-])(\.\.(?:/\.\.)*)(?:/|[^\w.]|$)`)

// TestNothingRefersOutside reads every file of the repository (tracked, or
// new and not ignored) and fails on a line that names the reference folder
// or a relative path that climbs out of the repository from the file's
// own directory.
func TestNothingRefersOutside(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	files := repoFiles(t, root)
	if len(files) < 100 {
		t.Fatalf("found %d files in %s: not the repository?", len(files), root)
	}
	self := filepath.Join("internal", "standalone", "standalone_test.go")
	for _, rel := range files {
		if rel == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			if os.IsNotExist(err) { // deleted, not yet committed
				continue
			}
			t.Fatal(err)
		}
		if bytes.IndexByte(b, 0) >= 0 {
			continue // binary
		}
		dir := filepath.Dir(filepath.Join(root, rel))
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s:%d: refers to %q, outside the repository: copy what is needed in, with its source, or cite upstream", rel, n, m)
			}
			for _, m := range relative.FindAllStringSubmatch(line, -1) {
				to, err := filepath.Rel(root, filepath.Join(dir, m[1]))
				if err != nil || to == ".." || strings.HasPrefix(to, "../") {
					t.Errorf("%s:%d: %q from %s leaves the repository", rel, n, m[1], filepath.Dir(rel))
				}
			}
		}
	}
}

func repoFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v (the test reads the repository's file list from git)", root, err)
	}
	var files []string
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if f != "" {
			files = append(files, filepath.FromSlash(f))
		}
	}
	return files
}

func TestRelativePattern(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{`cd lab && go build -o ../bin/labsim`, []string{".."}},
		{`see ../../docs/x.md`, []string{"../.."}},
		{`imageDir: /var/lib/../../etc`, nil},
		{`a/../b`, nil},
		{`"../.."`, []string{"../.."}},
		{`cd ..`, []string{".."}},
		{`append(a, b...)`, nil},
		{`and so on ...`, nil},
		{`(../x) and ../y`, []string{"..", ".."}},
	} {
		var got []string
		for _, m := range relative.FindAllStringSubmatch(tc.line, -1) {
			got = append(got, m[1])
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%q: %q, want %q", tc.line, got, tc.want)
		}
	}
}

package diff

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestUnified(t *testing.T) {
	tests := []struct {
		name, before, after string
	}{
		{"create", "", "disable:\n- traefik\ntls-san:\n- 192.0.2.50\n"},
		{"delete", "a\nb\n", ""},
		{"one line changed", "disable:\n- traefik\ntls-san:\n- 192.0.2.50\nwrite-kubeconfig-mode: \"0644\"\n", "disable:\n- traefik\ntls-san:\n- 192.0.2.50\nwrite-kubeconfig-mode: \"0600\"\n"},
		{"two hunks", lines(1, 20), strings.Replace(strings.Replace(lines(1, 20), "line 2\n", "line two\n", 1), "line 18\n", "", 1)},
		{"no trailing newline", "a\nb", "a\nc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Unified("a/f", "b/f", tt.before, tt.after)
			golden := filepath.Join("testdata", strings.ReplaceAll(tt.name, " ", "-")+".diff")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("diff mismatch:\n got:\n%s\nwant:\n%s", got, want)
			}
			checkWithPatch(t, tt.before, tt.after, got)
		})
	}
}

func TestEqual(t *testing.T) {
	if d := Unified("a", "b", "x\n", "x\n"); d != "" {
		t.Errorf("equal inputs gave %q", d)
	}
}

// checkWithPatch applies the diff with the real patch(1), when present,
// to prove the hunks are well-formed.
func checkWithPatch(t *testing.T, before, after, d string) {
	t.Helper()
	if _, err := exec.LookPath("patch"); err != nil || !strings.HasSuffix(before, "\n") || !strings.HasSuffix(after, "\n") && after != "" {
		return
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("patch", "-s", f)
	cmd.Stdin = strings.NewReader(d)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("patch rejected the diff: %v\n%s", err, out)
	}
	got, _ := os.ReadFile(f)
	if string(got) != after {
		t.Errorf("patched file = %q, want %q", got, after)
	}
}

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

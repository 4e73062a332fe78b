package localfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteIsPrivateAndAtomic(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kube", "x.kubeconfig")
	for _, content := range []string{"a", "b"} {
		if err := Write(p, []byte(content)); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(p); string(b) != content {
			t.Errorf("content %q, want %q", b, content)
		}
	}
	fi, _ := os.Stat(p)
	di, _ := os.Stat(filepath.Dir(p))
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Errorf("modes %v %v", fi.Mode().Perm(), di.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 || strings.HasPrefix(entries[0].Name(), ".") {
		t.Errorf("left: %v", entries)
	}
}

package kubeconfig

import (
	"context"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

var update = flag.Bool("update", false, "rewrite golden files")

const k3sYAML = `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Q0EtREFUQQ==
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
kind: Config
users:
- name: default
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZLURBVEE=
`

func TestAdminGolden(t *testing.T) {
	got, err := Admin([]byte(k3sYAML), "lab-mgmt", "https://192.0.2.50:6443")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join("testdata", "admin.kubeconfig")
	if *update {
		os.MkdirAll("testdata", 0o755)
		os.WriteFile(p, got, 0o644)
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if s := Secrets(got); len(s) != 2 || s[0] != "S0VZLURBVEE=" || s[1] != "KEY-DATA" {
		t.Errorf("Secrets = %q", s)
	}
}

func TestMerge(t *testing.T) {
	admin, err := Admin([]byte(k3sYAML), "lab-mgmt", "https://192.0.2.50:6443")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	target := filepath.Join(dir, "config")
	foreign := `apiVersion: v1
kind: Config
current-context: prod
clusters:
- name: prod
  cluster: {server: "https://prod.example:6443"}
users:
- name: prod
  user: {token: abc}
contexts:
- name: prod
  context: {cluster: prod, user: prod}
`
	os.WriteFile(target, []byte(foreign), 0o600)
	for i := 0; i < 2; i++ { // idempotent
		if switched, err := merge(t, admin, "lab-mgmt", target); err != nil || switched {
			t.Fatalf("merge into a config with a current context: switched=%v err=%v", switched, err)
		}
	}
	b, _ := os.ReadFile(target)
	s := string(b)
	for _, want := range []string{"current-context: prod", "server: https://prod.example:6443", "name: lab-mgmt", "server: https://192.0.2.50:6443"} {
		if !strings.Contains(s, want) {
			t.Errorf("merged config lacks %q:\n%s", want, s)
		}
	}
	// A foreign entry with our name is a clash, and the file is untouched.
	clash := strings.ReplaceAll(foreign, "prod", "lab-mgmt")
	os.WriteFile(target, []byte(clash), 0o600)
	if _, err := merge(t, admin, "lab-mgmt", target); err == nil || !strings.Contains(err.Error(), "is not this cluster's") {
		t.Fatalf("clash: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != clash {
		t.Error("clashing file was changed")
	}
}

// Without a current context, kubectl would go to localhost:8080: the merged
// context becomes the current one, and Merge says so.
func TestMergeSetsAMissingCurrentContext(t *testing.T) {
	admin, err := Admin([]byte(k3sYAML), "lab-mgmt", "https://192.0.2.50:6443")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, existing string // "" with absent: no file at all
		absent         bool
	}{
		{name: "no file", absent: true},
		{name: "empty file", existing: ""},
		{name: "entries but no current context", existing: "apiVersion: v1\nkind: Config\nclusters:\n- name: other\n  cluster: {server: \"https://other.example:6443\"}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := filepath.Join(t.TempDir(), ".kube", "config")
			if !tc.absent {
				os.MkdirAll(filepath.Dir(target), 0o700)
				os.WriteFile(target, []byte(tc.existing), 0o600)
			}
			switched, err := merge(t, admin, "lab-mgmt", target)
			if err != nil || !switched {
				t.Fatalf("switched=%v err=%v", switched, err)
			}
			b, _ := os.ReadFile(target)
			if !strings.Contains(string(b), "current-context: lab-mgmt") {
				t.Errorf("no current context:\n%s", b)
			}
			// A second merge finds its own context current: nothing to switch.
			if switched, err := merge(t, admin, "lab-mgmt", target); err != nil || switched {
				t.Errorf("second merge: switched=%v err=%v", switched, err)
			}
		})
	}
}

// TestFileWritesThePlan: the file step's plan writes exactly the bytes
// its diff shows, 0600, without reading the cluster again; with the same
// content and mode the plan is empty.
func TestFileWritesThePlan(t *testing.T) {
	path := filepath.Join(t.TempDir(), "admin.kubeconfig")
	// Render is where the step reads the cluster (k3s.yaml, the API
	// server's answer): Check reads, Apply only writes what it is handed.
	renders := 0
	f := &File{StepID: "admin-kubeconfig", Path: path, Render: func(context.Context) ([]byte, string, error) {
		renders++
		return []byte("rendered\n"), "", nil
	}}
	p, err := f.Check(context.Background())
	want := []effect.Effect{effect.WriteLocal{Path: path, Content: []byte("rendered\n")}}
	if err != nil || len(p.Changes) != 1 || !reflect.DeepEqual(p.Changes[0].Effects, want) || p.Changes[0].Diff.After != "rendered\n" {
		t.Fatalf("plan: %+v %v", p, err)
	}
	before := renders
	if err := step.CarryOut(context.Background(), f, p, steptest.Executor(nil)); err != nil {
		t.Fatal(err)
	}
	if renders != before {
		t.Errorf("carrying out read the cluster again (%d renders): it must write the plan it is handed", renders-before)
	}
	if b, _ := os.ReadFile(path); string(b) != "rendered\n" || !Private(path) {
		t.Errorf("wrote %q (private %v)", b, Private(path))
	}
	os.WriteFile(path, []byte("rendered\n"), 0o600)
	if p, err := f.Check(context.Background()); err != nil || !p.Empty() {
		t.Errorf("as rendered: %+v %v", p, err)
	}
}

// merge is mgmtctl kubeconfig --merge's read, Merged and write.
func merge(t *testing.T, admin []byte, name, target string) (bool, error) {
	t.Helper()
	cur, err := os.ReadFile(target)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	b, switched, err := Merged(admin, name, target, cur)
	if err != nil {
		return false, err
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return false, err
	}
	return switched, os.WriteFile(target, b, 0o600)
}

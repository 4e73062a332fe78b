package kubeconfig

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

func TestWriteFileIsPrivateAndAtomic(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kube", "x.kubeconfig")
	if err := WriteFile(p, []byte("a")); err != nil {
		t.Fatal(err)
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

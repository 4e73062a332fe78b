package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBackupRestore is day two's main path: apply, a test object, backup;
// destroy and apply a fresh VM (the object is gone); a damaged copy of the
// snapshot and a config with other pins are refused before anything is
// touched; restore brings the object and the five providers back, and the
// next apply changes nothing. No output holds the server token.
func TestBackupRestore(t *testing.T) {
	t.Parallel()
	e := start(t)
	mustSucceed(t, e.apply(), "apply")
	kubectl := func(args ...string) string { return e.adminKubectl(args...).Stdout }
	if out := kubectl("create", "configmap", "before-backup", "--from-literal=k=v"); !strings.Contains(out, "created") {
		t.Fatalf("test object: %q", out)
	}

	r := e.mgmtctl("backup")
	mustSucceed(t, r, "backup")
	root := filepath.Join(e.LaptopHome(), ".local/share/mgmtctl/backups/lab-mgmt")
	dirs, _ := filepath.Glob(filepath.Join(root, "*"))
	if len(dirs) != 1 {
		t.Fatalf("backups: %v", dirs)
	}
	dir := dirs[0]
	token, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil || !strings.HasPrefix(string(token), "K10") {
		t.Fatalf("token: %q %v", token, err)
	}
	secret := strings.TrimSpace(string(token))
	noSecret(t, r, secret)
	for _, f := range []string{"snapshot", "token", "backup.json", "mgmt.yaml", "snapshot.sha256"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if r := e.vmSSH("sudo ls /var/lib/rancher/k3s/server/db/snapshots"); strings.TrimSpace(r.Stdout) != "" {
		t.Errorf("the server kept its copy: %q", r.Stdout)
	}

	mustSucceed(t, e.mgmtctl("destroy", "--yes"), "destroy")
	mustSucceed(t, e.apply(), "apply a fresh VM")
	if out := kubectl("get", "configmap", "before-backup", "--ignore-not-found", "-o", "name"); out != "" {
		t.Fatalf("the fresh cluster has the object: %q", out)
	}

	// A damaged snapshot is refused before any connection.
	bad := filepath.Join(e.LaptopHome(), "damaged")
	if out, err := exec.Command("cp", "-a", dir, bad).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	os.Truncate(filepath.Join(bad, "snapshot"), 4096)
	r = e.mgmtctl("restore", "--from", bad, "--yes")
	if r.Code != 1 || !strings.Contains(r.Stderr, "is damaged: its sha256 is") || strings.Contains(r.Stdout, "PHASE [restore]") {
		t.Errorf("damaged snapshot: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	// Other pins: refused unless told.
	e.editConfig("  kubeconfig:", "  certManager:\n    version: v1.21.1\n  kubeconfig:")
	r = e.mgmtctl("restore", "--from", dir, "--yes")
	if r.Code != 1 || !strings.Contains(r.Stderr, "certManager: v1.21.2 in the backup, v1.21.1 in the config") || strings.Contains(r.Stdout, "PHASE [restore]") {
		t.Errorf("other pins: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	e.editConfig("  certManager:\n    version: v1.21.1\n", "")
	// Without --yes on a closed stdin: nothing.
	if r := e.mgmtctl("restore", "--from", dir); r.Code != 1 || strings.Contains(r.Stdout, "PHASE [restore]") {
		t.Errorf("unconfirmed restore: exit %d\n%s", r.Code, r.Stdout)
	}

	r = e.mgmtctl("restore", "--from", dir, "--yes")
	mustSucceed(t, r, "restore")
	noSecret(t, r, secret)
	if out := kubectl("get", "configmap", "before-backup", "-o", "jsonpath={.data.k}"); out != "v" {
		t.Errorf("the object is not back: %q", out)
	}
	if out := kubectl("get", allProviders, "-A", "-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{end}`); out != "TrueTrueTrueTrueTrue" {
		t.Errorf("providers Ready: %q", out)
	}
	if got := recap(t, e.apply()); !strings.Contains(got, "changed=0") {
		t.Errorf("apply after the restore: %s", got)
	}
}

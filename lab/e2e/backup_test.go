package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBackupRestore is day two's main path: apply, a test object, backup;
// destroy and apply a fresh VM (the object is gone); a damaged copy of the
// snapshot and a config with other pins are refused before anything is
// touched; restore brings the object and the five providers back, and the
// next apply changes nothing. No output holds the server token; the
// snapshot holds the Proxmox token secret encrypted, and the restored
// cluster serves it.
func TestBackupRestore(t *testing.T) {
	t.Parallel()
	e := startConverged(t)
	kubectl := func(args ...string) string { return e.adminKubectl(args...).Stdout }
	if out := kubectl("create", "configmap", "before-backup", "--from-literal=k=v", "--from-literal=marker="+configMapMarker); !strings.Contains(out, "created") {
		t.Fatalf("test object: %q", out)
	}
	// Two workload Clusters, of Cluster API's own CRD: one running, one its
	// owner paused.
	e.kubectlApply("clusters", workloadClusters)

	r := e.mgmtctl("backup")
	mustSucceed(t, r, "backup")
	// Paused for the snapshot only: as they were once it is taken.
	if got := e.clusterPauses(); got != "parked=true, workload=<none>," {
		t.Errorf("Clusters after the backup: %s\n%s", got, r.Stdout)
	}
	if !strings.Contains(r.Stdout, "pause Cluster default/workload for the snapshot") || !strings.Contains(r.Stdout, "resume Cluster default/workload, paused for a backup") {
		t.Errorf("the backup's pause and resume:\n%s", r.Stdout)
	}
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
	// Secrets encrypted at rest (k3s's secrets-encryption): the Proxmox
	// token secret, in the cluster as CAPMOX's variables, is in the
	// snapshot neither as its bytes nor as their base64, while a
	// ConfigMap's value, never encrypted, is there as its bytes (so the
	// search reads what etcd holds).
	snap, err := os.ReadFile(filepath.Join(dir, "snapshot"))
	if err != nil {
		t.Fatal(err)
	}
	proxmoxSecret := e.secret()
	if bytes.Contains(snap, []byte(proxmoxSecret)) || bytes.Contains(snap, []byte(base64.StdEncoding.EncodeToString([]byte(proxmoxSecret)))) {
		t.Errorf("the snapshot holds the Proxmox token secret in clear")
	}
	if !bytes.Contains(snap, []byte(configMapMarker)) {
		t.Errorf("the snapshot holds no %q: the search for the secret read nothing of etcd's", configMapMarker)
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
	// The restored cluster reads the Secrets the snapshot holds
	// encrypted: its key came back with the snapshot's bootstrap data.
	if out := kubectl("get", "secrets", "-n", "capmox-system", "-l", "mgmtctl.io/variables-for", "-o", "jsonpath={.items[0].data.PROXMOX_SECRET}"); out != base64.StdEncoding.EncodeToString([]byte(proxmoxSecret)) {
		t.Errorf("the restored CAPMOX variables: PROXMOX_SECRET %q", out)
	}
	if out := kubectl("get", allProviders, "-A", "-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{end}`); out != "TrueTrueTrueTrueTrue" {
		t.Errorf("providers Ready: %q", out)
	}
	// The restored Clusters wake up paused: the one the backup paused is
	// held until told, the owner's stays as it was; apply resumes neither.
	base := filepath.Base(dir)
	if got := e.clusterPauses(); got != "parked=true, workload=true,"+base {
		t.Errorf("Clusters after the restore: %s", got)
	}
	if n := e.heldBeforeManagers(); n != 1 {
		t.Errorf("%d Clusters held, want 1", n)
	}
	r = e.apply()
	if got := recap(t, r); !strings.Contains(got, "changed=0") || !strings.Contains(r.Stdout, "Cluster default/workload held paused since a restore") {
		t.Errorf("apply after the restore: %s\n%s", got, r.Stdout)
	}
	mustSucceed(t, e.mgmtctl("restore", "--resume"), "restore --resume")
	if got := e.clusterPauses(); got != "parked=true, workload=<none>," {
		t.Errorf("Clusters after restore --resume: %s", got)
	}

	// A backup stopped between its pause and its resume leaves a Cluster
	// as mgmtctl paused it (server-side apply, its field manager): status
	// says so, and the next apply resumes it. (A Cluster made by kubectl
	// create: kubectl apply --server-side would hand the fields a
	// client-side apply set to the manager it names.)
	created := filepath.Join(e.LaptopHome(), "interrupted.yaml")
	os.WriteFile(created, []byte(strings.Replace(strings.Split(workloadClusters, "---\n")[0], "workload", "interrupted", 1)), 0o600)
	pause := filepath.Join(e.LaptopHome(), "pause.yaml")
	os.WriteFile(pause, []byte(strings.Replace(workloadPause, "NAME", "interrupted", 1)), 0o600)
	if r := e.adminKubectl("create", "-f", created); r.Code != 0 {
		t.Fatalf("create: %+v", r)
	}
	if r := e.adminKubectl("apply", "--server-side", "--field-manager=mgmtctl", "--force-conflicts", "-f", pause); r.Code != 0 {
		t.Fatalf("pause as a backup does: %+v", r)
	}
	if _, code, out := e.status(); code != 1 || !strings.Contains(out, "resume Cluster default/interrupted, paused for a backup") {
		t.Errorf("status with a Cluster left paused: exit %d\n%s", code, out)
	}
	r = e.apply()
	mustSucceed(t, r, "apply after an interrupted backup")
	if got := e.clusterPauses(); got != "interrupted=<none>, parked=true, workload=<none>," {
		t.Errorf("Clusters after the apply: %s\n%s", got, r.Stdout)
	}
}

// configMapMarker is a ConfigMap value the snapshot tests look for in
// etcd's bytes: ConfigMaps are not encrypted at rest.
const configMapMarker = "plain-configmap-value-7f3c"

// workloadClusters are two Clusters of Cluster API's v1beta2, as a
// management cluster's users have them: one running, one its owner
// paused.
const workloadClusters = `apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: workload
  namespace: default
spec:
  clusterNetwork:
    serviceDomain: cluster.local
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: parked
  namespace: default
spec:
  paused: true
  clusterNetwork:
    serviceDomain: cluster.local
`

// workloadPause is what mgmtctl's backup applies to pause a Cluster.
const workloadPause = `apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: NAME
  namespace: default
  annotations:
    mgmtctl.io/paused-for-backup: "true"
spec:
  paused: true
`

// clusterPauses is each Cluster's spec.paused (<none> when unset) and the
// backup a restore holds it for: "name=paused,held ...".
func (e *env) clusterPauses() string {
	e.t.Helper()
	r := e.adminKubectl("get", "clusters.cluster.x-k8s.io", "-n", "default", "-o",
		`jsonpath={range .items[*]}{.metadata.name}={.spec.paused},{.metadata.annotations.mgmtctl\.io/held-since-restore} {end}`)
	if r.Code != 0 {
		e.t.Fatalf("read the Clusters: %+v", r)
	}
	return strings.TrimSpace(strings.ReplaceAll(r.Stdout, "=,", "=<none>,"))
}

// heldBeforeManagers fails the test unless every Cluster a restore holds
// was paused before any provider's manager started: the time mgmtctl's
// field manager last applied the Cluster (its managedFields entry, the
// pause and the hold) is no later than the start of every container of
// the providers' pods (those the operator labels with
// cluster.x-k8s.io/provider). A manager started before the pause could
// have reconciled the restored state. It returns how many Clusters it
// checked.
func (e *env) heldBeforeManagers() int {
	e.t.Helper()
	var clusters, pods struct {
		Items []struct {
			Metadata struct {
				Namespace, Name string
				Annotations     map[string]string
				ManagedFields   []struct {
					Manager, Operation string
					Time               time.Time
				}
			}
			Status struct {
				ContainerStatuses []struct {
					Name  string
					State struct {
						Running *struct{ StartedAt time.Time }
					}
				}
			}
		}
	}
	for _, q := range []struct {
		args []string
		into any
	}{
		{[]string{"get", "clusters.cluster.x-k8s.io", "-A", "-o", "json", "--show-managed-fields"}, &clusters},
		{[]string{"get", "pods", "-A", "-l", "cluster.x-k8s.io/provider", "-o", "json"}, &pods},
	} {
		r := e.adminKubectl(q.args...)
		if err := json.Unmarshal([]byte(r.Stdout), q.into); r.Code != 0 || err != nil {
			e.t.Fatalf("kubectl %v: %v %+v", q.args, err, r)
		}
	}
	var paused time.Time // the last pause of a held Cluster
	n := 0
	for _, c := range clusters.Items {
		if c.Metadata.Annotations["mgmtctl.io/held-since-restore"] == "" {
			continue
		}
		n++
		for _, m := range c.Metadata.ManagedFields {
			if m.Manager == "mgmtctl" && m.Operation == "Apply" && m.Time.After(paused) {
				paused = m.Time
			}
		}
	}
	if n > 0 && paused.IsZero() {
		e.t.Fatalf("no Cluster held has mgmtctl's managedFields entry: %+v", clusters.Items)
	}
	started := 0
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			switch {
			case cs.State.Running == nil:
				e.t.Errorf("pod %s/%s: container %s not running", p.Metadata.Namespace, p.Metadata.Name, cs.Name)
			case cs.State.Running.StartedAt.Before(paused):
				e.t.Errorf("pod %s/%s: container %s started at %s, before the Clusters were held (%s)", p.Metadata.Namespace, p.Metadata.Name, cs.Name,
					cs.State.Running.StartedAt.Format(time.RFC3339), paused.Format(time.RFC3339))
			default:
				started++
			}
		}
	}
	if started < 5 {
		e.t.Errorf("%d provider containers running after the restore, want the five providers'", started)
	}
	return n
}

package e2e

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/lab/internal/lab"
)

// TestS3Restore is disaster recovery from a snapshot k3s's schedule put
// in S3, for a cluster of three servers: spec.backup.s3 with the keys in
// secrets.yaml turns on k3s's etcd-s3 on every server (the keys in its
// environment file, one server restarted at a time) and the laptop keeps
// the cluster's token; k3s uploads a snapshot to the lab's S3
// (versitygw) and backup --list shows it; every server is destroyed and
// a new cluster (a new token) made; a restore from the snapshot, under
// the old cluster's token, brings the object back with three healthy
// members; apply then changes nothing. Each server uploads to a folder of
// its own under its cluster's, where k3s's retention (etcd-s3-retention,
// per folder) keeps 2 per server, and the cluster built after the
// disaster, its schedule as frequent, prunes none of the old cluster's
// snapshots. The S3 secret key is in no output,
// no laptop file but secrets.yaml, no debug log, no process's arguments,
// and no config.yaml.
func TestS3Restore(t *testing.T) {
	t.Parallel()
	e := haEnv(t, haBackedUp.Start(t))
	creds, err := os.ReadFile(e.S3CredentialsPath())
	if err != nil {
		t.Fatal(err)
	}
	keys := strings.Fields(string(creds))
	access, secret := keys[0], keys[1]
	proxmoxSecret := e.secret() // before secrets.yaml gets the S3 keys
	sec, err := os.ReadFile(e.SecretsPath())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.SecretsPath(), append(sec, []byte("s3:\n  accessKey: "+access+"\n  secretKey: "+secret+"\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	var outputs []string
	run := func(what string, args ...string) string {
		t.Helper()
		r := e.mgmtctl(args...)
		outputs = append(outputs, r.Stdout+r.Stderr)
		mustSucceed(t, r, what)
		return r.Stdout
	}
	e.editConfig("  kubeconfig:", "  backup:\n    schedule: \"* * * * *\"\n    retention: 2\n    s3:\n      endpoint: "+lab.MirrorAddr+":7070\n      bucket: k3s-snapshots\n      folder: lab-mgmt\n      caFile: "+e.CABundle()+"\n  kubeconfig:")
	out := run("apply with S3", "apply")
	for _, srv := range []string{"lab-mgmt", "lab-mgmt-2", "lab-mgmt-3"} {
		for _, want := range []string{"changed: [" + srv + "] k3s/s3-keys: create /etc/default/k3s with the S3 keys", "changed: [" + srv + "] k3s/restart-k3s: restart k3s"} {
			if !strings.Contains(out, want) {
				t.Errorf("apply lacks %q:\n%s", want, out)
			}
		}
	}
	var cluster string // the id of the cluster's folder
	for i, id := range []int{lab.VMID, lab.VMID + 1, lab.VMID + 2} {
		srv := []string{"lab-mgmt", "lab-mgmt-2", "lab-mgmt-3"}[i]
		upper := filepath.Join(e.VMDisk(id), "upper")
		cfg, _ := os.ReadFile(filepath.Join(upper, "etc/rancher/k3s/config.yaml"))
		m := regexp.MustCompile(`etcd-s3: true\netcd-s3-endpoint: "` + regexp.QuoteMeta(lab.MirrorAddr) + `:7070"\netcd-s3-bucket: "k3s-snapshots"\netcd-s3-folder: "lab-mgmt/cluster-([0-9a-f]{12})/` + srv + `"\netcd-s3-retention: 2\n`).FindSubmatch(cfg)
		if m == nil || strings.Contains(string(cfg), secret) || (cluster != "" && string(m[1]) != cluster) {
			t.Fatalf("VM %d's config.yaml (the cluster's folder so far %q):\n%s", id, cluster, cfg)
		}
		cluster = string(m[1])
		if fi, err := os.Stat(filepath.Join(upper, "etc/default/k3s")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("VM %d's /etc/default/k3s: %v %v", id, fi, err)
		}
	}
	if got := recap(t, e.apply()); !strings.Contains(got, "changed=0") {
		t.Errorf("apply after S3: %s", got)
	}

	// Workload Clusters, one with Machines, running, and one its owner
	// paused: a scheduled snapshot pauses none of them.
	e.kubectlApply("machines", workloadMachines)
	e.kubectlApply("clusters", workloadClusters)
	// A marker, then a scheduled snapshot in S3 that holds it.
	if r := e.viaVIP("create", "configmap", "in-s3", "--from-literal=k=v", "--from-literal=marker="+configMapMarker); !strings.Contains(r.Stdout, "created") {
		t.Fatalf("marker: %+v", r)
	}
	marked := time.Now()
	var snap string
	deadline := time.Now().Add(150 * time.Second)
	for snap == "" {
		// The schedule fires on the minute: nothing to watch from here.
		time.Sleep(5 * time.Second)
		r := e.mgmtctl("backup", "--list", "-o", "json")
		outputs = append(outputs, r.Stdout+r.Stderr)
		mustSucceed(t, r, "backup --list")
		for _, b := range listedIn(t, r.Stdout) {
			// A whole second after the marker: the snapshot holds it.
			if b.Where == "s3" && b.Created.After(marked.Add(time.Second)) && b.Cluster == cluster &&
				strings.HasPrefix(b.Location, "s3://k3s-snapshots/lab-mgmt/cluster-"+cluster+"/lab-mgmt/etcd-snapshot-lab-mgmt-") {
				snap = b.Snapshot
				break
			}
		}
		if snap == "" && time.Now().After(deadline) {
			t.Fatalf("no scheduled snapshot in S3 within 150 s:\n%s", r.Stdout)
		}
	}
	if list := run("backup --list", "backup", "--list"); !strings.Contains(list, "s3:"+snap) || !strings.Contains(list, "scheduled by k3s") {
		t.Errorf("backup --list:\n%s", list)
	}
	// Secrets encrypted at rest: no object in the bucket holds the Proxmox
	// token secret, as its bytes or their base64; the marker's snapshot
	// holds the ConfigMap's value (the search reads etcd's bytes).
	for _, c := range []struct {
		what, text string
		want       bool
	}{
		{"the Proxmox token secret", proxmoxSecret, false},
		{"the Proxmox token secret's base64", base64.StdEncoding.EncodeToString([]byte(proxmoxSecret)), false},
		{"the ConfigMap's value", configMapMarker, true},
	} {
		r := e.Run("mirror", "grep", "-rlF", "-e", c.text, "/var/lib/labsim/s3")
		if found := strings.TrimSpace(r.Stdout) != ""; found != c.want || r.Code > 1 {
			t.Errorf("objects in the bucket holding %s (want some: %v): exit %d %q %s", c.what, c.want, r.Code, r.Stdout, r.Stderr)
		}
	}

	// Every server lost; a new cluster, with a token of its own and a
	// folder of its own, its schedule as frequent: it prunes its own
	// servers' snapshots to 2 each and none of the old cluster's.
	run("destroy", "destroy", "--yes")
	run("apply three fresh servers", "apply")
	seen := map[string]map[string]bool{} // the new cluster's server folders: every snapshot seen there
	deadline = time.Now().Add(5 * time.Minute)
	for {
		r := e.mgmtctl("backup", "--list", "-o", "json")
		outputs = append(outputs, r.Stdout+r.Stderr)
		mustSucceed(t, r, "backup --list")
		now := map[string]int{}
		oldThere := false
		for _, b := range listedIn(t, r.Stdout) {
			switch {
			case b.Where != "s3":
			case b.Cluster == cluster:
				oldThere = oldThere || b.Snapshot == snap
			default:
				dir := path.Dir(strings.TrimPrefix(b.Location, "s3://k3s-snapshots/"))
				if seen[dir] == nil {
					seen[dir] = map[string]bool{}
				}
				seen[dir][b.Snapshot] = true
				now[dir]++
			}
		}
		if !oldThere {
			t.Fatalf("the old cluster's snapshot %s is gone from the bucket:\n%s", snap, r.Stdout)
		}
		pruned := len(now) == 3
		for dir, n := range now {
			if n > 2 {
				t.Fatalf("%d snapshots in %s, with a retention of 2:\n%s", n, dir, r.Stdout)
			}
			pruned = pruned && n == 2 && len(seen[dir]) > 2
		}
		if pruned {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new cluster's servers did not each upload three snapshots (two kept) within 5 minutes: %v\n%s", seen, r.Stdout)
		}
		time.Sleep(5 * time.Second)
	}
	if out := e.viaVIP("get", "configmap", "in-s3", "--ignore-not-found", "-o", "name").Stdout; out != "" {
		t.Fatalf("the fresh cluster has the object: %q", out)
	}
	tokens, err := os.ReadFile(filepath.Join(e.LaptopHome(), ".local/share/mgmtctl/backups/lab-mgmt/cluster-tokens.json"))
	if err != nil || strings.Count(string(tokens), `"token"`) != 2 {
		t.Fatalf("the laptop's record of the cluster's tokens: %v\n%s", err, tokens)
	}

	out = run("restore from S3", "restore", "--from", "s3:"+snap, "--yes")
	if got, want := strings.Join(phaseSteps(out, "restore"), " "),
		"stop-k3s@lab-mgmt-2 stop-k3s@lab-mgmt-3 restore@lab-mgmt hold-clusters@lab-mgmt release-hold@lab-mgmt api-vip@lab-mgmt rejoin@lab-mgmt-2 rejoin@lab-mgmt-3 etcd-members@lab-mgmt stale-nodes@lab-mgmt machine-drift@pve1"; got != want {
		t.Errorf("restore's steps:\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(out, "from s3://k3s-snapshots/lab-mgmt/cluster-"+cluster+"/lab-mgmt/"+snap) || !strings.Contains(out, "3 etcd members healthy") {
		t.Errorf("restore's output:\n%s", out)
	}
	if v := e.viaVIP("get", "configmap", "in-s3", "-o", "jsonpath={.data.k}").Stdout; v != "v" {
		t.Errorf("the marker after the restore: %q", v)
	}
	// Every Cluster the snapshot holds running wakes up paused and held,
	// paused before any provider's manager started (k3s held without its
	// agent until then); the owner's stays as it was.
	if got, want := e.clusterPauses(), "lab1=true,s3:"+snap+" parked=true, workload=true,s3:"+snap; got != want {
		t.Errorf("Clusters after the restore: %s, want %s", got, want)
	}
	if n := e.heldBeforeManagers(); n != 2 {
		t.Errorf("%d Clusters held, want 2", n)
	}
	if !strings.Contains(out, "changed: [lab-mgmt] restore/release-hold: remove "+"/etc/rancher/k3s/config.yaml.d/90-mgmtctl-restore-hold.yaml") {
		t.Errorf("the restore did not release its hold:\n%s", out)
	}
	r := e.apply()
	if got := recap(t, r); !strings.Contains(got, "changed=0") || !strings.Contains(r.Stdout, "held paused since a restore") {
		t.Errorf("apply after the restore: %s\n%s", got, r.Stdout)
	}
	run("restore --resume", "restore", "--resume")
	if got := e.clusterPauses(); got != "lab1=<none>, parked=true, workload=<none>," {
		t.Errorf("Clusters after restore --resume: %s", got)
	}
	if got := recap(t, e.apply()); !strings.Contains(got, "changed=0") {
		t.Errorf("apply after restore --resume: %s", got)
	}
	// A name the bucket does not have is refused before k3s stops.
	if r := e.mgmtctl("restore", "--from", "s3:etcd-snapshot-nowhere-1", "--yes"); r.Code != 1 || !strings.Contains(r.Stderr, "no snapshot etcd-snapshot-nowhere-1 in the bucket") {
		t.Errorf("restore of a missing snapshot: %+v", r)
	}

	// The secret key: in no output, no laptop file but secrets.yaml (the
	// debug logs included), no process's arguments.
	e.secretNowhere(secret, "the S3 secret key", outputs)
}

// listedBackup is one entry of backup --list -o json.
type listedBackup struct {
	Where, Snapshot, Location, Cluster string
	Created                            time.Time
}

func listedIn(t *testing.T, out string) []listedBackup {
	t.Helper()
	var listed []listedBackup
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatalf("backup --list -o json: %v\n%s", err, out)
	}
	return listed
}

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

// TestHARestore is disaster recovery for a cluster of three servers,
// onto VMs destroyed and re-created, from both kinds of snapshot: one
// k3s's schedule put in S3 and one `mgmtctl backup` took to the laptop.
// One test, as one lab: a restore of three servers needs a converged
// cluster destroyed and three fresh servers applied, which is most of
// its time (docs/testing.md).
//
// From S3: spec.backup.s3 with the keys in secrets.yaml turns on k3s's
// etcd-s3 on every server (the keys in its environment file, one server
// restarted at a time) and the laptop keeps the cluster's token; k3s
// uploads a snapshot to the lab's S3 (versitygw) and backup --list shows
// it; every server is destroyed and a new cluster (a new token) made; a
// restore from the snapshot, under the old cluster's token, brings the
// object back with three healthy members, every running Cluster held
// paused before any provider's manager started; apply then changes
// nothing. Each server uploads to a folder of its own under its
// cluster's, where k3s's retention (etcd-s3-retention, per folder) keeps
// 2 per server, and the cluster built after the disaster, its schedule
// as frequent, prunes none of the old cluster's snapshots.
//
// From the laptop: a restore killed half-way is completed by the next,
// which follows k3s's procedure (k3s stopped on the others, the first
// reset from the snapshot, the others' etcd data moved aside and each
// rejoined) and leaves three healthy members, the objects back, the
// removed server's Node gone, the Machines' drift reported and the
// providers Ready; the next apply changes nothing.
//
// No output holds the cluster token; the S3 secret key is in no output,
// no laptop file but secrets.yaml, no debug log, no process's arguments,
// and no config.yaml.
func TestHARestore(t *testing.T) {
	t.Parallel()
	// Three servers converged with the test object (before-backup) made:
	// a copy of the template TestHA starts from too, whose own backup
	// this test leaves aside.
	e := haEnv(t, haBackedUp.Start(t))
	e.bin = raceChecked(t, e.bin)
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
	e.editConfig("  kubeconfig:", "  backup:\n    schedule: \"@every 30s\"\n    retention: 2\n    s3:\n      endpoint: "+lab.MirrorAddr+":7070\n      bucket: k3s-snapshots\n      folder: lab-mgmt\n      caFile: "+e.CABundle()+"\n  kubeconfig:")
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
	// paused: a scheduled snapshot pauses none of them. The Machines'
	// VMs, as CAPMOX made them on two nodes; a server's Node since
	// removed.
	e.kubectlApply("machines", workloadMachines)
	e.kubectlApply("clusters", workloadClusters)
	e.kubectlApply("stale-node", staleServer)
	for _, m := range []struct{ name, node string }{{"lab1-cp-1", "pve1"}, {"lab1-w-1", "pve2"}} {
		if r := e.viaVIP("patch", "proxmoxmachine", m.name, "--subresource=status", "--type=merge", "-p", `{"status":{"proxmoxNode":"`+m.node+`"}}`); r.Code != 0 {
			t.Fatalf("ProxmoxMachine %s's node: %+v", m.name, r)
		}
	}
	e.capmoxVM("pve1", 201, "lab1-cp-1", "192.0.2.101")
	e.capmoxVM("pve2", 202, "lab1-w-1", "192.0.2.102")
	// A backup to the laptop (it pauses the running Clusters for its
	// snapshot, and resumes them): the template's backup, then this one
	// (directories named by time).
	run("backup", "backup")
	mans, _ := filepath.Glob(filepath.Join(e.LaptopHome(), ".local/share/mgmtctl/backups/lab-mgmt/*/backup.json"))
	if len(mans) != 2 {
		t.Fatalf("backups: %v", mans)
	}
	dirs := []string{filepath.Dir(mans[1])}
	token, err := os.ReadFile(filepath.Join(dirs[0], "token"))
	if err != nil || !strings.HasPrefix(string(token), "K10") {
		t.Fatalf("token: %q %v", token, err)
	}
	clusterToken := strings.TrimSpace(string(token))

	// A marker, then a scheduled snapshot in S3 that holds it.
	if r := e.viaVIP("create", "configmap", "in-s3", "--from-literal=k=v", "--from-literal=marker="+configMapMarker); !strings.Contains(r.Stdout, "created") {
		t.Fatalf("marker: %+v", r)
	}
	marked := time.Now()
	var snap string
	deadline := time.Now().Add(150 * time.Second)
	for snap == "" {
		// The schedule fires every 30 s: nothing to watch from here.
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
	// Every server lost, at once: with a retention of 2, the old
	// cluster's own schedule would prune the snapshot a minute on. A new
	// cluster, with a token of its own and a folder of its own, its
	// schedule as frequent: it prunes its own servers' snapshots to 2
	// each and none of the old cluster's.
	run("destroy", "destroy", "--yes")
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
	if list := run("backup --list", "backup", "--list"); !strings.Contains(list, "s3:"+snap) || !strings.Contains(list, "scheduled by k3s") {
		t.Errorf("backup --list:\n%s", list)
	}
	tokens, err := os.ReadFile(filepath.Join(e.LaptopHome(), ".local/share/mgmtctl/backups/lab-mgmt/cluster-tokens.json"))
	if err != nil || strings.Count(string(tokens), `"token"`) != 2 {
		t.Fatalf("the laptop's record of the cluster's tokens: %v\n%s", err, tokens)
	}

	// Since the snapshots, a Machine's VM was deleted and CAPMOX made one
	// they have no Machine for.
	if r := e.OnNode("pve2", "qm destroy 202"); r.Code != 0 {
		t.Fatalf("qm destroy 202: %+v", r)
	}
	e.capmoxVM("pve3", 203, "lab1-w-2", "192.0.2.103")

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
	// A name the bucket does not have is refused before any server's k3s
	// stops (two of three stopped, etcd would have lost its quorum).
	if r := e.mgmtctl("restore", "--from", "s3:etcd-snapshot-nowhere-1", "--yes"); r.Code != 1 || !strings.Contains(r.Stderr, "no snapshot etcd-snapshot-nowhere-1 in the bucket") ||
		strings.Contains(r.Stdout, "changed: ") {
		t.Errorf("restore of a missing snapshot: %+v", r)
	}
	for _, ip := range []string{"192.0.2.51", "192.0.2.52"} {
		if r := e.SSH("ubuntu", ip, filepath.Join(e.LaptopHome(), ".config/mgmtctl/known_hosts"), "systemctl is-enabled k3s; systemctl is-active k3s"); r.Stdout != "enabled\nactive\n" {
			t.Errorf("k3s on %s after the refused restore: %+v", ip, r)
		}
	}

	// Something made since the restore from S3, which the laptop's
	// backup (older than the S3 snapshot) does not hold either.
	if r := e.viaVIP("create", "configmap", "after-s3-restore"); r.Code != 0 {
		t.Fatal(r)
	}

	// From the laptop's backup now, onto the same servers: a restore
	// killed as the second server's etcd data is moved aside (the first
	// already reset) is completed by the next.
	second := filepath.Join(e.VMDisk(lab.VMID+1), "upper/var/lib/rancher/k3s/server")
	aside, _ := filepath.Glob(filepath.Join(second, "db-before-restore-*")) // the restore from S3's
	e.killRunWhen([]string{"restore", "--from", dirs[0], "--yes"}, func() bool {
		moved, _ := filepath.Glob(filepath.Join(second, "db-before-restore-*"))
		return len(moved) > len(aside)
	}, "the second server's rejoin")
	r = e.mgmtctl("restore", "--from", dirs[0], "--yes")
	outputs = append(outputs, r.Stdout+r.Stderr)
	mustSucceed(t, r, "restore after a restore killed")
	noSecret(t, r, clusterToken)
	// k3s's procedure, in its order: the others stopped before the first
	// is reset, then each rejoins.
	if got, want := strings.Join(phaseSteps(r.Stdout, "restore"), " "),
		"stop-k3s@lab-mgmt-2 stop-k3s@lab-mgmt-3 restore@lab-mgmt hold-clusters@lab-mgmt release-hold@lab-mgmt api-vip@lab-mgmt rejoin@lab-mgmt-2 rejoin@lab-mgmt-3 etcd-members@lab-mgmt stale-nodes@lab-mgmt machine-drift@pve1"; got != want {
		t.Errorf("restore's steps:\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(r.Stdout, "3 etcd members healthy") || !strings.Contains(r.Stdout, "delete Node lab-mgmt-old") {
		t.Errorf("restore's output:\n%s", r.Stdout)
	}
	// The third server, held down by the killed restore, was still
	// masked: nothing could start it meanwhile.
	if !strings.Contains(r.Stdout, "ok: [lab-mgmt-3] restore/stop-k3s: k3s is stopped (inactive) and masked until it rejoins") {
		t.Errorf("lab-mgmt-3 was not held down since the killed restore:\n%s", r.Stdout)
	}
	// The drift between the snapshot's Machines and Proxmox now.
	for _, want := range []string{"Machine default/lab1-w-1: its VM 202 on pve2 is gone from Proxmox",
		"VM 203 (lab1-w-2) on pve3: made by CAPMOX (tag ip_net0_192.0.2.103), no Machine knows it"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("the drift report lacks %q:\n%s", want, r.Stdout)
		}
	}
	if strings.Contains(r.Stdout, "lab1-cp-1: its VM") {
		t.Errorf("a Machine whose VM is there reported:\n%s", r.Stdout)
	}
	// The backup paused the running Clusters for its snapshot: the
	// restore holds them so; the owner's stays as it was.
	backup := filepath.Base(dirs[0])
	if got, want := e.clusterPauses(), "lab1=true,"+backup+" parked=true, workload=true,"+backup; got != want {
		t.Errorf("Clusters after the restore: %s, want %s", got, want)
	}
	if n := e.heldBeforeManagers(); n != 2 {
		t.Errorf("%d Clusters held, want 2", n)
	}
	if out := e.viaVIP("get", "configmap", "before-backup", "-o", "jsonpath={.data.k}").Stdout; out != "v" {
		t.Errorf("the object is not back: %q", out)
	}
	for _, name := range []string{"in-s3", "after-s3-restore"} {
		if out := e.viaVIP("get", "configmap", name, "--ignore-not-found", "-o", "name").Stdout; out != "" {
			t.Errorf("%s, made after the backup, survived its restore: %q", name, out)
		}
	}
	if r := e.viaVIP("get", "nodes", "-o", readyNodes); r.Stdout != "lab-mgmt=True,true lab-mgmt-2=True,true lab-mgmt-3=True,true " {
		t.Errorf("nodes after the restore: %+v", r)
	}
	if out := e.viaVIP("get", allProviders, "-A", "-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{end}`).Stdout; out != "TrueTrueTrueTrueTrue" {
		t.Errorf("providers Ready: %q", out)
	}
	// Each peer's old etcd data is kept aside, as k3s's message asks, and
	// its k3s is no longer masked.
	for _, ip := range []string{"192.0.2.51", "192.0.2.52"} {
		ls := e.SSH("ubuntu", ip, filepath.Join(e.LaptopHome(), ".config/mgmtctl/known_hosts"), "sudo ls /var/lib/rancher/k3s/server; systemctl is-enabled k3s")
		if !strings.Contains(ls.Stdout, "db-before-restore-") || !strings.HasSuffix(ls.Stdout, "\nenabled\n") {
			t.Errorf("%s's old etcd data, and k3s unmasked: %+v", ip, ls)
		}
	}
	// Told to, the restore resumes the Clusters it held.
	run("restore --resume", "restore", "--resume")
	if got := e.clusterPauses(); got != "lab1=<none>, parked=true, workload=<none>," {
		t.Errorf("Clusters after restore --resume: %s", got)
	}
	r = e.apply()
	outputs = append(outputs, r.Stdout+r.Stderr)
	if got := recap(t, r); !strings.Contains(got, "changed=0 ") {
		t.Errorf("apply after the restore: %s\n%s", got, r.Stdout)
	}
	noSecret(t, r, clusterToken)

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

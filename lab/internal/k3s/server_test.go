package k3s

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// TestUnknownConfigKeysAreWarnedAndSkipped: a config.yaml key that is no
// `k3s server` flag (a typo of one) is skipped with k3s's own warning, one
// line per key, in logrus's text format; the known keys are read.
func TestUnknownConfigKeysAreWarnedAndSkipped(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.yaml")
	cfg := "write-kubeconfig-mode: \"0644\"\ntls-sans:\n  - 192.0.2.60\nnode-ip: 192.0.2.50\ncluster-inti: true\n"
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"cluster-inti", "tls-sans"}; !reflect.DeepEqual(c.Unknown, want) {
		t.Errorf("unknown keys %q, want %q", c.Unknown, want)
	}
	if c.NodeIP != "192.0.2.50" {
		t.Errorf("node-ip = %q: a known key was lost", c.NodeIP)
	}
	var log bytes.Buffer
	warnUnknown(&log, c.Unknown, time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC))
	want := `time="2026-12-04T22:00:00Z" level=warning msg="Unknown flag --cluster-inti found in config.yaml, skipping"
time="2026-12-04T22:00:00Z" level=warning msg="Unknown flag --tls-sans found in config.yaml, skipping"
`
	if log.String() != want {
		t.Errorf("logged:\n%s\nwant:\n%s", log.String(), want)
	}
}

// TestLoadConfigSnapshots: the scheduled snapshots' keys are read as k3s
// reads them, config.yaml as mgmtctl writes it.
func TestLoadConfigSnapshots(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(p, []byte("cluster-init: true\netcd-snapshot-schedule-cron: \"* * * * *\"\netcd-snapshot-retention: 2\n"), 0o600)
	c, err := LoadConfig(p)
	if err != nil || c.SnapshotCron != "* * * * *" || c.SnapshotRetention != 2 || c.DisableSnapshots || len(c.Unknown) != 0 {
		t.Errorf("%+v, %v", c, err)
	}
	// The S3 retention: etcd-s3-retention when set, else the local one,
	// else k3s's default.
	for _, tc := range []struct {
		config string
		want   int
	}{
		{"etcd-snapshot-retention: 2\n", 2},
		{"etcd-snapshot-retention: 2\netcd-s3-retention: 6\n", 6},
		{"etcd-s3: true\n", 5},
	} {
		os.WriteFile(p, []byte(tc.config), 0o600)
		if c, err := LoadConfig(p); err != nil || c.S3.Retention != tc.want || len(c.Unknown) != 0 {
			t.Errorf("%q: S3 retention %d (unknown %v), want %d: %v", tc.config, c.S3.Retention, c.Unknown, tc.want, err)
		}
	}
	os.WriteFile(p, []byte("etcd-disable-snapshots: true\netcd-snapshot-retention: five\n"), 0o600)
	if _, err := LoadConfig(p); err == nil {
		t.Error("a retention that is no number was read")
	}
}

// TestLoadConfigDropIns: config.yaml.d's files are read after
// config.yaml, in name order, as k3s reads them: a key replaces the value
// before it, a key suffixed "+" appends to it, and a file whose name ends
// in neither .yaml nor .yml is not read.
func TestLoadConfigDropIns(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.yaml")
	os.WriteFile(p, []byte("node-ip: 192.0.2.50\nkube-apiserver-arg:\n  - audit-log-maxage=3\n"), 0o600)
	os.Mkdir(p+".d", 0o755)
	os.WriteFile(filepath.Join(p+".d", "50-hold.yaml"), []byte("disable-agent: true\nkube-apiserver-arg+:\n  - disable-admission-plugins=ValidatingAdmissionWebhook\n"), 0o600)
	os.WriteFile(filepath.Join(p+".d", "10-ip.yml"), []byte("node-ip: 192.0.2.51\n"), 0o600)
	os.WriteFile(filepath.Join(p+".d", "90-ignored.yaml.bak"), []byte("secrets-encryption: true\n"), 0o600)
	c, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"audit-log-maxage=3", "disable-admission-plugins=ValidatingAdmissionWebhook"}
	if c.NodeIP != "192.0.2.51" || !c.DisableAgent || !reflect.DeepEqual(c.APIServerArgs, want) || c.SecretsEncryption || len(c.Unknown) != 0 {
		t.Errorf("%+v", c)
	}
	// Without "+", a later list replaces the earlier one.
	os.WriteFile(filepath.Join(p+".d", "50-hold.yaml"), []byte("kube-apiserver-arg:\n  - disable-admission-plugins=ValidatingAdmissionWebhook\n"), 0o600)
	if c, err := LoadConfig(p); err != nil || len(c.APIServerArgs) != 1 || c.DisableAgent {
		t.Errorf("%+v, %v", c, err)
	}
	// Drop-ins alone, with no config.yaml.
	os.Remove(p)
	if c, err := LoadConfig(p); err != nil || c.NodeIP != "192.0.2.51" {
		t.Errorf("%+v, %v", c, err)
	}
}

// TestWithExtraArgs: kube-apiserver-arg replaces the flag k3s sets or
// adds one it does not.
func TestWithExtraArgs(t *testing.T) {
	got := withExtraArgs([]string{"--enable-admission-plugins=NodeRestriction", "--profiling=false"},
		[]string{"profiling=true", "--disable-admission-plugins=MutatingAdmissionWebhook"})
	want := []string{"--enable-admission-plugins=NodeRestriction", "--profiling=true", "--disable-admission-plugins=MutatingAdmissionWebhook"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%q, want %q", got, want)
	}
}

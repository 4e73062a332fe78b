package k3s

import (
	"context"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/remote/remotetest"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestParseVersion(t *testing.T) {
	tests := map[string]string{
		"k3s version v1.35.7+k3s1 (abcdef12)\ngo version go1.24.5\n": "v1.35.7+k3s1",
		"k3s version v1.36.3+k3s1 (0123abcd)\n":                      "v1.36.3+k3s1",
		"":                                                           "",
		"sh: 1: k3s: not found\n":                                    "",
	}
	for in, want := range tests {
		if got := ParseVersion(in); got != want {
			t.Errorf("ParseVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRenderConfigGolden(t *testing.T) {
	vip := netip.MustParseAddr("192.0.2.60")
	for _, c := range []struct {
		golden string
		spec   Spec
	}{
		{"config.yaml", Spec{IP: netip.MustParseAddr("192.0.2.50")}},
		// A new cluster's servers: Secrets encrypted at rest.
		{"config-first.yaml", Spec{IP: netip.MustParseAddr("192.0.2.50"), VIP: vip, SecretsEncryption: true}},
		{"config-join.yaml", Spec{IP: netip.MustParseAddr("192.0.2.51"), VIP: vip, Join: "https://192.0.2.60:6443", SecretsEncryption: true}},
		{"config-snapshots.yaml", Spec{IP: netip.MustParseAddr("192.0.2.50"), SnapshotSchedule: "0 */6 * * *", SnapshotRetention: 10}},
		// The keys are not in it: they go to EnvPath.
		// The server's own folder under its cluster's; the retention
		// as k3s's etcd-s3-retention too.
		{"config-s3.yaml", Spec{Name: "lab-mgmt-2", IP: netip.MustParseAddr("192.0.2.50"), SnapshotSchedule: "0 */6 * * *", SnapshotRetention: 2, S3: &S3Spec{Endpoint: "192.0.2.20:7070",
			Bucket: "k3s-snapshots", Folder: "lab-mgmt", Region: "eu-west-1", CA: []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"),
			AccessKey: "LABACCESS", SecretKey: "c2VjcmV0/key+1=", Cluster: "0123456789ab"}}},
		// The cluster's id not known yet (a check run before its first
		// VM exists): no S3 settings rather than a folder to move.
		{"config-s3-pending.yaml", Spec{Name: "lab-mgmt", IP: netip.MustParseAddr("192.0.2.50"), S3: &S3Spec{Endpoint: "192.0.2.20:7070", Bucket: "k3s-snapshots"}}},
	} {
		golden(t, c.golden, RenderConfig(c.spec))
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		os.WriteFile(p, got, 0o644)
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s: got:\n%s\nwant:\n%s", name, got, want)
	}
}

func TestKubeVIPManifestGolden(t *testing.T) {
	golden(t, "kube-vip.yaml", KubeVIPManifest(KubeVIPSpec{Address: netip.MustParseAddr("192.0.2.60"), Interface: "eth0",
		Image: "ghcr.io/kube-vip/kube-vip", Version: "v1.2.3"}))
}

func TestAgentNotRunning(t *testing.T) {
	for _, c := range []struct {
		stderr string
		want   bool
	}{
		{"QEMU guest agent is not running", true},
		{"No QEMU guest agent configured", false},
		{"VM 110 is not running", false},
	} {
		if got := agentNotRunning(c.stderr); got != c.want {
			t.Errorf("%q: %v, want %v", c.stderr, got, c.want)
		}
	}
}

// TestEnvFile: the S3 keys' environment file is written when it differs,
// with no content in the plan; left alone when right; removed once S3 is
// gone, but only if mgmtctl wrote it.
func TestEnvFile(t *testing.T) {
	s3 := &S3Spec{Endpoint: "192.0.2.20:7070", Bucket: "k3s-snapshots", AccessKey: "LABACCESS", SecretKey: "c2VjcmV0/key+1="}
	want := "# Managed by mgmtctl: the S3 keys of spec.backup.s3 (secrets.yaml). Mode 0600.\nAWS_ACCESS_KEY_ID=LABACCESS\nAWS_SECRET_ACCESS_KEY=c2VjcmV0/key+1=\n"
	for _, tc := range []struct {
		name    string
		s3      *S3Spec
		file    string // "" for none
		summary string // the change's; "" for none
	}{
		{"new", s3, "", "create /etc/default/k3s with the S3 keys (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; 0600, content not shown)"},
		{"up to date", s3, want, ""},
		{"key rotated", s3, strings.Replace(want, "key+1", "key+2", 1), "update /etc/default/k3s with the S3 keys (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; 0600, content not shown)"},
		{"S3 gone", nil, want, "remove the S3 keys from /etc/default/k3s (spec.backup.s3 is gone)"},
		{"someone else's", nil, "HTTPS_PROXY=http://proxy:3128\n", ""},
		{"no S3, no file", nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &remotetest.Host{HostName: "lab-mgmt", Files: map[string][]byte{}}
			if tc.file != "" {
				h.Files[EnvPath] = []byte(tc.file)
			}
			v := &VM{Spec: Spec{Name: "lab-mgmt", S3: tc.s3}, Host: h}
			p, err := (&Env{V: v}).Check(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.summary == "" && !p.Empty():
				t.Errorf("plan %+v, want none", p)
			case tc.summary != "" && (len(p.Changes) != 1 || p.Changes[0].Summary != tc.summary):
				t.Errorf("plan %+v, want %q", p, tc.summary)
			case tc.summary != "" && p.Changes[0].Diff != nil:
				t.Errorf("the plan shows the keys: %+v", p.Changes[0].Diff)
			}
		})
	}
	if got := string(RenderEnv(Spec{S3: s3})); got != want {
		t.Errorf("RenderEnv = %q", got)
	}
}

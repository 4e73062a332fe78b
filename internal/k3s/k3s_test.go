package k3s

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
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
		{"config-first.yaml", Spec{IP: netip.MustParseAddr("192.0.2.50"), VIP: vip}},
		{"config-join.yaml", Spec{IP: netip.MustParseAddr("192.0.2.51"), VIP: vip, Join: "https://192.0.2.60:6443"}},
		{"config-snapshots.yaml", Spec{IP: netip.MustParseAddr("192.0.2.50"), SnapshotSchedule: "0 */6 * * *", SnapshotRetention: 10}},
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

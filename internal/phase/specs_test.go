package phase

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/k3s"
	"github.com/mgmtctl/mgmtctl/internal/proxmox"
	"github.com/mgmtctl/mgmtctl/internal/upgrade"
)

// load writes a config with the given spec body and loads it with the
// real loader, in a home that has an SSH public key.
func load(t *testing.T, spec string) *config.Loaded {
	t.Helper()
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519.pub"), []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBNqX0ocPvUhqnXmSiE1X44IwvtNlnZ+0Zt4F3iHFNQR user@laptop\n"), 0o644)
	cfg := filepath.Join(t.TempDir(), "mgmt.yaml")
	os.WriteFile(cfg, []byte("apiVersion: mgmtctl/v1alpha1\nkind: ManagementCluster\nmetadata:\n  name: lab-mgmt\nspec:\n"+spec), 0o644)
	l, err := config.Load(cfg, "", config.Env{Home: home, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestSpecs: each phase's package gets its part of a loaded config, typed,
// from the real loader (defaults applied, values parsed).
func TestSpecs(t *testing.T) {
	l := load(t, `  proxmox:
    host: 192.0.2.10
    node: pve
    tokenID: capmox@pve!capi
  vm:
    id: 110
    vlan: 4
    address: 192.0.2.50/24
    gateway: 192.0.2.1
`)
	want := proxmox.Spec{Node: "pve", Storage: "local-lvm", ImageDir: "/var/lib/vz/template/iso", ImageURL: config.DefaultImageURL,
		ImageSHA256: config.DefaultImageSHA256, VMID: 110, Name: "lab-mgmt", Cores: 2, MemoryMiB: 4096, DiskGiB: 30, Bridge: "vmbr0", VLAN: 4,
		Net: netip.MustParsePrefix("192.0.2.50/24"), Gateway: "192.0.2.1", Nameservers: []string{"192.0.2.1"}, User: "ubuntu"}
	if got := vmSpec(&l.Cluster, l.Servers()[0]); got.Net != want.Net || got.Name != want.Name || got.VMID != want.VMID || got.Cores != want.Cores || got.ImageSHA256 != want.ImageSHA256 || len(got.Nameservers) != 1 {
		t.Errorf("vm spec = %+v\nwant %+v", got, want)
	}
	if got := k3sSpec(l, 0); got != (k3s.Spec{Name: "lab-mgmt", IP: netip.MustParseAddr("192.0.2.50"), Version: config.K3sRelease{Major: 1, Minor: 35, Patch: 7, Build: 1}, InstallScriptURL: config.DefaultK3sInstallScript, SecretsEncryption: true}) {
		t.Errorf("k3s spec = %+v", got)
	}
}

// TestHASpecs: with three servers, each VM is on its node under its own
// name, the first server initialises the cluster and the others join it
// at the VIP, which every server has in its certificate.
func TestHASpecs(t *testing.T) {
	l := load(t, `  proxmox:
    tokenID: capmox@pve!capi
  vm:
    gateway: 192.0.2.1
  servers:
    - {node: pve1, host: 192.0.2.10, id: 110, address: 192.0.2.50/24}
    - {node: pve2, host: 192.0.2.11, id: 111, address: 192.0.2.51/24}
    - {node: pve3, host: 192.0.2.12, id: 112, address: 192.0.2.52/24}
  vip: {address: 192.0.2.60}
`)
	if got := vmSpec(&l.Cluster, l.Servers()[2]); got.Node != "pve3" || got.VMID != 112 || got.Name != "lab-mgmt-3" || got.Net != netip.MustParsePrefix("192.0.2.52/24") {
		t.Errorf("third VM = %+v", got)
	}
	vip := netip.MustParseAddr("192.0.2.60")
	if got := k3sSpec(l, 0); got.Join != "" || got.VIP != vip || got.Name != "lab-mgmt" {
		t.Errorf("first server = %+v", got)
	}
	if got := k3sSpec(l, 1); got.Join != "https://192.0.2.60:6443" || got.VIP != vip || got.IP != netip.MustParseAddr("192.0.2.51") || got.Name != "lab-mgmt-2" {
		t.Errorf("second server = %+v", got)
	}
}

// TestImageRow: upgrade plan's image row names every node that holds the
// pinned image, and the nodes apply would download it to.
func TestImageRow(t *testing.T) {
	for _, tc := range []struct {
		nodes              []string
		has                map[string]bool
		running, action, n string
	}{
		{[]string{"pve"}, map[string]bool{"pve": true}, "on pve", upgrade.None, "a new image"},
		{[]string{"pve1", "pve2", "pve3"}, map[string]bool{"pve1": true, "pve2": true, "pve3": true}, "on pve1, pve2, pve3", upgrade.None, "a new image"},
		{[]string{"pve1", "pve2", "pve3"}, map[string]bool{"pve1": true, "pve3": true}, "on pve1, pve3", upgrade.Install, "not on pve2 yet: apply downloads it there; "},
		{[]string{"pve1", "pve2"}, map[string]bool{}, "", upgrade.Install, "not on pve1, pve2 yet"},
	} {
		got, lack := imageRow("noble.img", tc.nodes, tc.has)
		if (len(lack) > 0) != (tc.action == upgrade.Install) || got.Running != tc.running || got.Action != tc.action || !strings.HasPrefix(got.Note, tc.n) || got.Pinned != "noble.img" {
			t.Errorf("%v %v: %+v %v", tc.nodes, tc.has, got, lack)
		}
	}
}

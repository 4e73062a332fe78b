package phase

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/k3s"
	"github.com/mgmtctl/mgmtctl/internal/proxmox"
)

// TestSpecs: each phase's package gets its part of a loaded config, typed,
// from the real loader (defaults applied, values parsed).
func TestSpecs(t *testing.T) {
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519.pub"), []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBNqX0ocPvUhqnXmSiE1X44IwvtNlnZ+0Zt4F3iHFNQR user@laptop\n"), 0o644)
	cfg := filepath.Join(t.TempDir(), "mgmt.yaml")
	os.WriteFile(cfg, []byte(`apiVersion: mgmtctl/v1alpha1
kind: ManagementCluster
metadata:
  name: lab-mgmt
spec:
  proxmox:
    host: 192.0.2.10
    node: pve
    tokenID: capmox@pve!capi
  vm:
    id: 110
    vlan: 4
    address: 192.0.2.50/24
    gateway: 192.0.2.1
`), 0o644)
	l, err := config.Load(cfg, "", config.Env{Home: home, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	want := proxmox.Spec{Node: "pve", Storage: "local-lvm", ImageDir: "/var/lib/vz/template/iso", ImageURL: config.DefaultImageURL,
		ImageSHA256: config.DefaultImageSHA256, VMID: 110, Name: "lab-mgmt", Cores: 2, MemoryMiB: 4096, DiskGiB: 30, Bridge: "vmbr0", VLAN: 4,
		Net: netip.MustParsePrefix("192.0.2.50/24"), Gateway: "192.0.2.1", Nameservers: []string{"192.0.2.1"}, User: "ubuntu"}
	if got := vmSpec(&l.Cluster); got.Net != want.Net || got.Name != want.Name || got.VMID != want.VMID || got.Cores != want.Cores || got.ImageSHA256 != want.ImageSHA256 || len(got.Nameservers) != 1 {
		t.Errorf("vm spec = %+v\nwant %+v", got, want)
	}
	if got := k3sSpec(&l.Cluster); got != (k3s.Spec{Name: "lab-mgmt", IP: netip.MustParseAddr("192.0.2.50"), Version: config.K3sRelease{Major: 1, Minor: 35, Patch: 7, Build: 1}, InstallScriptURL: config.DefaultK3sInstallScript}) {
		t.Errorf("k3s spec = %+v", got)
	}
}

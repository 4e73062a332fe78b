package proxmox

import (
	"flag"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/shell"
)

var update = flag.Bool("update", false, "rewrite golden files")

func spec() Spec {
	return Spec{Node: "pve", Storage: "local-lvm", ImageDir: "/var/lib/vz/template/iso",
		ImageURL: "https://cloud-images.ubuntu.com/noble/20260926/noble-server-cloudimg-amd64.img",
		VMID:     110, Name: "lab-mgmt", Cores: 2, MemoryMiB: 4096, DiskGiB: 30, Bridge: "vmbr0", VLAN: 4,
		Net: netip.MustParsePrefix("192.0.2.50/24"), Gateway: "192.0.2.1", Nameservers: []string{"192.0.2.1", "192.0.2.2"}, User: "ubuntu"}
}

func TestCreateArgsGolden(t *testing.T) {
	s := &CreateVM{N: &Node{Spec: spec()}}
	line, err := shell.Join(s.CreateArgs()...)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.ReplaceAll(line, " --", " \\\n  --") + "\n"
	if *update {
		os.WriteFile("testdata/qm-create.txt", []byte(got), 0o644)
	}
	want, err := os.ReadFile("testdata/qm-create.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestFacts(t *testing.T) {
	n := &Node{Spec: spec()}
	n.Facts.Config = ParseConfig("name: lab-mgmt\ntags: mgmtctl\nscsi0: local-lvm:vm-110-disk-0,size=3584M\n")
	if !n.Ours() {
		t.Error("tagged VM of this name is ours")
	}
	if b, ok := n.DiskBytes(); !ok || b != 3584<<20 {
		t.Errorf("disk = %d %v", b, ok)
	}
	for _, c := range []string{"name: lab-mgmt\n", "name: other\ntags: mgmtctl\n", "name: lab-mgmt\ntags: prod;mgmtctl-old\n"} {
		n.Facts.Config = ParseConfig(c)
		if n.Ours() {
			t.Errorf("%q counted as ours", c)
		}
	}
	n.Facts.Config = ParseConfig("name: lab-mgmt\ntags: prod;mgmtctl\n")
	if !n.Ours() {
		t.Error("tag among others not found")
	}
	if got := n.ImagePath(); got != "/var/lib/vz/template/iso/noble-server-cloudimg-amd64.img" {
		t.Errorf("image path %s", got)
	}
}

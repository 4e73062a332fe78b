package lab_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mgmtctl/mgmtctl/lab/internal/lab"
	"github.com/mgmtctl/mgmtctl/lab/labtest"
)

func TestMain(m *testing.M) {
	labtest.Costs = costs
	code := m.Run()
	labtest.RemoveAll()
	os.Exit(code)
}

// withVM is a lab whose VM was created, started and written to.
var withVM = &labtest.Template{Name: "with a VM", Nodes: 1, Build: func(t testing.TB, l *labtest.Lab) {
	if r := l.PVE(createVM + " && qm start 110"); r.Code != 0 {
		t.Fatalf("create: %+v", r)
	}
	if err := l.WaitVM(110); err != nil {
		t.Fatal(err)
	}
	if r := vmSSH(l, "echo before-the-stop | sudo tee /etc/mark >/dev/null"); r.Code != 0 {
		t.Fatalf("write on the VM: %+v", r)
	}
}}

func vmSSH(l *labtest.Lab, command string) labtest.Result {
	kh := filepath.Join(l.LaptopHome(), "vm_known_hosts")
	os.WriteFile(kh, []byte(lab.VMAddr+" "+l.VMHostKey(110)+"\n"), 0o644)
	return l.SSH("ubuntu", lab.VMAddr, kh, command)
}

// TestTemplateCopies: a copy of a stopped lab is the same lab, started
// again: its VM runs again (qm start, as after a power cut) with what was
// written to its disk, the same host keys (the laptop's known_hosts
// holds), a boot ID of this boot; two copies are two labs.
func TestTemplateCopies(t *testing.T) {
	t.Parallel()
	a, b := withVM.Start(t), withVM.Start(t)
	if a.Net.Prefix == b.Net.Prefix {
		t.Fatalf("two copies share namespaces %s", a.Net.Prefix)
	}
	boots := map[string]bool{}
	for _, l := range []*labtest.Lab{a, b} {
		if r := l.PVE("qm status 110"); r.Stdout != "status: running\n" {
			t.Errorf("%s: %+v", l.Dir, r)
		}
		r := vmSSH(l, "cat /etc/mark /proc/sys/kernel/random/boot_id")
		f := strings.Fields(r.Stdout)
		if r.Code != 0 || len(f) != 2 || f[0] != "before-the-stop" {
			t.Fatalf("%s: the VM after the copy: %+v", l.Dir, r)
		}
		boots[f[1]] = true
	}
	host, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if len(boots) != 2 || boots[strings.TrimSpace(string(host))] {
		t.Errorf("boot IDs %v: each boot's own, not the machine's", boots)
	}
	if r := vmSSH(a, "echo a | sudo tee /etc/mark >/dev/null"); r.Code != 0 {
		t.Fatal(r)
	}
	if r := vmSSH(b, "cat /etc/mark"); r.Stdout != "before-the-stop\n" {
		t.Errorf("a write to one copy reached the other: %+v", r)
	}
}

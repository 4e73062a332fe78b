package labtest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/lab/internal/lab"
)

// Template is a lab brought to a state once per test binary, for the tests
// that start from that state (a converged cluster) rather than test how it
// is reached: it is built in a lab of its own, then powered off with its
// files kept, and each test gets a copy of those files started as a lab of
// its own. The copy is the same lab: the same addresses (its namespaces are
// new, named after its directory), host keys, tokens, disks and etcd data;
// its VMs that ran are started again with `qm start` on their node, as
// after a power cut, so k3s starts as a server's restart starts it and the
// kubelet runs its pods again.
//
// A test binary that uses templates removes them when it ends (RemoveAll,
// from TestMain).
type Template struct {
	// Name says what state it is, in failures.
	Name string
	// Nodes is the lab's Proxmox nodes (Start's 1, StartNodes's n).
	Nodes int
	// Build brings a fresh lab to the state; it runs once, in the first
	// test that starts from the template, and fails that test (and every
	// test that starts from it) if it fails.
	Build func(t testing.TB, l *Lab)

	once sync.Once
	dir  string
	vms  []int // what ran when the lab was stopped
	err  error
}

var (
	templatesMu sync.Mutex
	templates   []*Template
)

// Start gives t a lab of its own in the template's state, removed when t
// ends (kept with LABSIM_KEEP=1 if t failed, as Start's).
func (tp *Template) Start(t testing.TB) *Lab {
	t.Helper()
	Skip(t)
	bin := Binary(t)
	// The test that builds the template holds a lab slot for it; the
	// others wait for the build without one (holdSlot).
	tp.once.Do(func() { holdSlot(t); tp.build(t, bin) })
	if tp.err != nil {
		t.Fatalf("template %q: %v", tp.Name, tp.err)
	}
	holdSlot(t)
	tl, err := newLab(t, bin, "lab-")
	if err != nil {
		t.Fatal(err)
	}
	// The lab's own binaries (bin/) are not copied: up links them from
	// the repository's bin/ again. Extended attributes in the user
	// namespace are: versitygw's POSIX backend keeps a bucket's ACL and
	// owner there, and a bucket copied without them answers 500.
	if out, err := exec.Command("sh", "-c", `tar -C "$1" --exclude=./bin --xattrs --xattrs-include='user.*' -cf - . | tar -C "$2" --xattrs --xattrs-include='user.*' -xf -`, "copy", tp.dir, tl.Dir).CombinedOutput(); err != nil {
		os.RemoveAll(tl.Dir)
		t.Fatalf("copy template %q: %v\n%s", tp.Name, err, out)
	}
	tl.up(tp.Nodes, true)
	// Every VM is started before any is waited for: a server of three
	// with embedded etcd boots only once its peers are up to make quorum.
	for _, id := range tp.vms {
		node, err := tl.NodeOf(id)
		if err != nil {
			t.Fatal(err)
		}
		if r := tl.OnNode(node, "qm start "+strconv.Itoa(id)); r.Code != 0 {
			t.Fatalf("template %q: qm start %d on %s: %+v", tp.Name, id, node, r)
		}
	}
	for _, id := range tp.vms {
		if err := tl.WaitVM(id); err != nil {
			t.Fatalf("template %q: VM %d did not boot again: %v", tp.Name, id, err)
		}
	}
	return tl
}

// build brings a lab up for the template, runs Build in it and powers it
// off, keeping its files as the template.
func (tp *Template) build(t testing.TB, bin string) {
	// Build may end t's goroutine (t.Fatal): what it leaves is an error.
	tp.err = errors.New("its build failed (in the first test to start from it)")
	tl, err := newLab(t, bin, "template-")
	if err != nil {
		tp.err = err
		return
	}
	templatesMu.Lock()
	templates = append(templates, tp)
	templatesMu.Unlock()
	tp.dir = tl.Dir
	// The template's own lab outlives the test that built it, stopped.
	tl.up(tp.Nodes, false)
	tp.Build(t, tl)
	if t.Failed() {
		return
	}
	r, err := lab.Call(tl.ControlSocket(), lab.Request{Op: "list"}, 10*time.Second)
	if err != nil {
		tp.err = fmt.Errorf("list its VMs: %w", err)
		return
	}
	for _, v := range r.VMs {
		if v.State == "up" {
			tp.vms = append(tp.vms, v.VMID)
		}
	}
	slices.Sort(tp.vms)
	if out, err := exec.Command(bin, "stop", "--dir", tl.Dir).CombinedOutput(); err != nil {
		tp.err = fmt.Errorf("labsim stop: %v\n%s", err, out)
		return
	}
	tp.err = nil
}

// RemoveAll removes every template this test binary built: TestMain calls
// it after m.Run.
func RemoveAll() {
	templatesMu.Lock()
	defer templatesMu.Unlock()
	for _, tp := range templates {
		if tp.dir == "" {
			continue
		}
		// A template is a stopped lab: down removes what up made.
		if l, err := lab.Open(tp.dir); err == nil {
			_ = l.Down(io.Discard)
		}
		os.RemoveAll(tp.dir)
	}
	templates = nil
}

// NodeOf names the Proxmox node whose /etc/pve holds VM vmid's config.
func (l *Lab) NodeOf(vmid int) (string, error) {
	m, _ := filepath.Glob(filepath.Join(l.Pmxcfs(), "nodes", "*", "qemu-server", strconv.Itoa(vmid)+".conf"))
	if len(m) != 1 {
		return "", fmt.Errorf("VM %d: %d configs in /etc/pve", vmid, len(m))
	}
	return filepath.Base(filepath.Dir(filepath.Dir(m[0]))), nil
}

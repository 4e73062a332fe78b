package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// stepPackages hold the steps: code that plans, reads and waits, and
// never writes (ARCHITECTURE.md, "Who writes").
var stepPackages = append([]string{"laptop", "backup"}, domain...)

// writers are what writes, or names what can, that a step package must
// not use: the run's effect.Executor writes on a plan's behalf, and
// nothing else does. A host a step holds is a remote.Reader and the
// cluster a kube.Reader, whose types have no method that writes (the
// compiler keeps that); the laptop's own files are reached through
// package os, whose writes the compiler cannot take away, so this test
// does.
var writers = map[string][]string{
	"os": {"WriteFile", "Create", "CreateTemp", "OpenFile", "Remove", "RemoveAll", "Rename",
		"Mkdir", "MkdirAll", "MkdirTemp", "Chmod", "Chown", "Lchown", "Chtimes", "Symlink", "Link", "Truncate"},
	// A Conn or a Dialer is a connection and what opens one: a Conn runs
	// commands, writes files and dials from the host's side (to the API
	// server, with the admin client a sudo read of k3s.yaml returns).
	module + "internal/remote": {"Host", "Runner", "WriteFile", "RememberHostKey", "ForgetHostKey", "Conn", "Dialer"},
	module + "internal/kube":   {"Cluster", "NewCluster"},
	module + "internal/effect": {"Executor"},
	// The Proxmox API's client calls what changes Proxmox (Call, Do): a
	// step holds a pve.Reader, which phase builds.
	module + "internal/pve": {"Client", "New"},
}

// forbidden are packages outside the tool a step package does not import
// at all, matched by prefix (a path ending in "/" is every package under
// it): a process of its own on the laptop, and client-go, whose clients
// (typed, dynamic, discovery, REST, scale, metadata, informers) each can
// write or build what writes. (The tool's own localfile is kept out by
// the arrows of TestImportsPointOneWay.) And net/http: a raw request can
// be any method; a step reads the Proxmox API through a pve.Reader.
var forbidden = []string{"os/exec", "k8s.io/client-go/", "net/http"}

// clientless are client-go's packages that hold no client: the types of an
// apply configuration, and a kubeconfig's (clientcmd parses and writes
// kubeconfig bytes; what it returns makes a client only through rest,
// which is forbidden).
var clientless = []string{"k8s.io/client-go/applyconfigurations/", "k8s.io/client-go/tools/clientcmd"}

// matches reports whether import path p is pattern or, for a pattern
// ending in "/", under it; a pattern without "/" at the end also covers
// its subpackages.
func matches(p, pattern string) bool {
	if strings.HasSuffix(pattern, "/") {
		return strings.HasPrefix(p, pattern)
	}
	return p == pattern || strings.HasPrefix(p, pattern+"/")
}

// banned reports whether a step package may not import p.
func banned(p string) bool {
	for _, a := range clientless {
		if matches(p, a) {
			return false
		}
	}
	for _, f := range forbidden {
		if matches(p, f) {
			return true
		}
	}
	return false
}

// TestStepsDoNotWrite reads every step package's source (not its tests)
// and fails on a use of anything in writers or an import in forbidden.
func TestStepsDoNotWrite(t *testing.T) {
	for _, pkg := range stepPackages {
		dir := filepath.Join("..", pkg)
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("package %s: no source (%v)", pkg, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			for _, use := range writes(t, f) {
				t.Errorf("%s: %s: a step writes only through its plan's effects", use.pos, use.what)
			}
		}
	}
}

type use struct{ pos, what string }

// writes is every use in file f of writers and forbidden.
func writes(t *testing.T, f string) []use {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []use
	names := map[string]string{} // the name a file uses for an import, to its path
	for _, imp := range file.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if banned(p) {
			out = append(out, use{fset.Position(imp.Pos()).String(), "imports " + p})
		}
		name := path.Base(p)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = p
	}
	ast.Inspect(file, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok {
			out = append(out, writingMethods(fset, ts)...)
			return true
		}
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		x, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		p, ok := names[x.Name]
		if !ok {
			return true
		}
		for _, w := range writers[p] {
			if sel.Sel.Name == w {
				out = append(out, use{fset.Position(sel.Pos()).String(), "uses " + x.Name + "." + w})
			}
		}
		return true
	})
	return out
}

// writeVerbs begin the name of a method that writes. A step package
// declares the interfaces and func types through which the phase hands it
// what it needs from the session (a VM's record, a dialer of the VM);
// phase is the composition root and is not scanned, so what it hands over
// is checked here, where it is declared: reads only.
var writeVerbs = []string{"Record", "Write", "Remove", "Delete", "Create", "Save", "Set", "Append", "Forget", "Remember", "Put", "Update"}

// writingMethods are the methods of interface ts named as a write, and
// its func-typed fields likewise.
func writingMethods(fset *token.FileSet, ts *ast.TypeSpec) []use {
	var fields []*ast.Field
	switch t := ts.Type.(type) {
	case *ast.InterfaceType:
		fields = t.Methods.List
	case *ast.StructType:
		for _, f := range t.Fields.List {
			if _, ok := f.Type.(*ast.FuncType); ok {
				fields = append(fields, f)
			}
		}
	}
	var out []use
	for _, f := range fields {
		for _, name := range f.Names {
			for _, v := range writeVerbs {
				if strings.HasPrefix(name.Name, v) {
					out = append(out, use{fset.Position(name.Pos()).String(), "declares " + ts.Name.Name + "." + name.Name + ", which the session would write through"})
				}
			}
		}
	}
	return out
}

// TestWritesFindsAWrite: the test above finds each kind of use it is
// there for, so its silence on the step packages means something.
func TestWritesFindsAWrite(t *testing.T) {
	src := `package p

import (
	"context"
	"net/http"
	"os"
	"os/exec"

	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/pve"
	rem "github.com/mgmtctl/mgmtctl/internal/remote"
)

type record interface {
	NeverReached() bool
	RecordGaveUp() error
}

type step struct {
	Dial      func(ctx context.Context) (rem.Reader, error)
	WriteNote func(string) error
}

func check(ctx context.Context, r rem.Reader) {
	os.ReadFile("/etc/hosts")
	os.WriteFile("/tmp/x", nil, 0o600)
	var h rem.Host
	_ = h
	var c *rem.Conn
	c.DialContext(ctx, "tcp", "127.0.0.1:6443")
	_ = rem.Dialer{}
	_, _ = kube.NewCluster(nil, nil, false)
	exec.Command("true")
	_ = pve.New("https://pve:8006", "capmox@pve!capi", "", http.DefaultClient)
	var api pve.Reader
	_ = api
}
`
	f := filepath.Join(t.TempDir(), "p.go")
	if err := os.WriteFile(f, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range writes(t, f) {
		got = append(got, u.what)
	}
	want := []string{"imports net/http", "imports os/exec", "imports k8s.io/client-go/kubernetes/typed/core/v1", "imports k8s.io/client-go/discovery",
		"declares record.RecordGaveUp, which the session would write through", "declares step.WriteNote, which the session would write through",
		"uses os.WriteFile", "uses rem.Host", "uses rem.Conn", "uses rem.Dialer", "uses kube.NewCluster", "uses pve.New"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("found %q, want %q", got, want)
	}
}

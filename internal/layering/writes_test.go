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
	module + "internal/remote": {"Host", "Runner", "WriteFile", "RememberHostKey", "ForgetHostKey"},
	module + "internal/kube":   {"Cluster", "NewCluster"},
	module + "internal/effect": {"Executor"},
}

// forbidden are packages outside the tool a step package does not import
// at all: a process of its own on the laptop, and client-go's clients,
// every one of which can write. (The tool's own localfile is kept out by
// the arrows of TestImportsPointOneWay.)
var forbidden = []string{"os/exec", "k8s.io/client-go/kubernetes", "k8s.io/client-go/dynamic", "k8s.io/client-go/rest"}

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
		for _, bad := range forbidden {
			if p == bad {
				out = append(out, use{fset.Position(imp.Pos()).String(), "imports " + p})
			}
		}
		name := path.Base(p)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = p
	}
	ast.Inspect(file, func(n ast.Node) bool {
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

// TestWritesFindsAWrite: the test above finds each kind of use it is
// there for, so its silence on the step packages means something.
func TestWritesFindsAWrite(t *testing.T) {
	src := `package p

import (
	"context"
	"os"
	"os/exec"

	"github.com/mgmtctl/mgmtctl/internal/kube"
	rem "github.com/mgmtctl/mgmtctl/internal/remote"
)

func check(ctx context.Context, r rem.Reader) {
	os.ReadFile("/etc/hosts")
	os.WriteFile("/tmp/x", nil, 0o600)
	var h rem.Host
	_ = h
	_, _ = kube.NewCluster(nil, nil, false)
	exec.Command("true")
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
	want := []string{"imports os/exec", "uses os.WriteFile", "uses rem.Host", "uses kube.NewCluster"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("found %q, want %q", got, want)
	}
}

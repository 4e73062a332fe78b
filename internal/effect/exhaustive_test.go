package effect

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestExecutorIsExhaustive: every type of the sealed set (each type of
// this package with an effect() method) has a case in the Executor's
// dispatch. Go's type switch compiles without one, and the effect would
// fail only when a run reached it.
func TestExecutorIsExhaustive(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var parsed []*ast.File
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, file)
	}
	if missing := missingCases(parsed, "Executor", "dispatch"); len(missing) > 0 {
		t.Errorf("effect types without a case in (*Executor).dispatch: %s", strings.Join(missing, ", "))
	}
}

// TestMissingCasesFindsOne: a planted effect type without its case is
// found, so the silence above means something.
func TestMissingCasesFindsOne(t *testing.T) {
	src := `package effect

type Effect interface{ effect() }
type Run struct{}
type Reboot struct{}
type Executor struct{}

func (Run) effect()     {}
func (*Reboot) effect() {}

func (x *Executor) dispatch(e Effect) error {
	switch e.(type) {
	case Run:
		return nil
	}
	return nil
}
`
	file, err := parser.ParseFile(token.NewFileSet(), "planted.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(missingCases([]*ast.File{file}, "Executor", "dispatch"), ","); got != "Reboot" {
		t.Errorf("missing cases %q, want Reboot", got)
	}
	// No dispatch at all is a failure too, not an empty list.
	if got := strings.Join(missingCases([]*ast.File{file}, "Executor", "carry"), ","); got != "no (*Executor).carry with a type switch" {
		t.Errorf("no dispatch: %q", got)
	}
}

// missingCases lists the effect types (receivers of an effect() method)
// that no case of the type switch in recv's method names.
func missingCases(files []*ast.File, recv, method string) []string {
	effects := map[string]bool{}
	var dispatch *ast.FuncDecl
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			name := typeName(fn.Recv.List[0].Type)
			switch {
			case fn.Name.Name == "effect":
				effects[name] = true
			case fn.Name.Name == method && name == recv:
				dispatch = fn
			}
		}
	}
	var sw *ast.TypeSwitchStmt
	if dispatch != nil {
		ast.Inspect(dispatch.Body, func(n ast.Node) bool {
			if s, ok := n.(*ast.TypeSwitchStmt); ok && sw == nil {
				sw = s
			}
			return sw == nil
		})
	}
	if sw == nil {
		return []string{"no (*" + recv + ")." + method + " with a type switch"}
	}
	for _, c := range sw.Body.List {
		for _, e := range c.(*ast.CaseClause).List {
			delete(effects, typeName(e))
		}
	}
	var out []string
	for name := range effects {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// typeName is T for T, *T and pkg.T.
func typeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return typeName(e.X)
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

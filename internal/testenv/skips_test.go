package testenv

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// walkGo parses each Go file of the module for which want says yes (by its
// path), build output, dot directories and test data left out, and hands
// it to visit; it returns how many it read.
func walkGo(t *testing.T, fset *token.FileSet, want func(path string) bool, visit func(path string, f *ast.File)) int {
	t.Helper()
	root := moduleRoot()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || !want(path) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		visit(path, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// Every skip in the project's tests goes through Unavailable,
// NotApplicable or a Require* helper: a bare t.Skip passes silently in CI
// (make test runs without -v, and a step that exits 0 passes), where a
// missing prerequisite must fail and an inapplicable test must be reported
// as such.
func TestSkipsGoThroughTestenv(t *testing.T) {
	root := moduleRoot()
	fset := token.NewFileSet()
	own := filepath.Join(root, "internal", "testenv")
	files := walkGo(t, fset, func(path string) bool {
		return strings.HasSuffix(path, "_test.go") && filepath.Dir(path) != own
	}, func(_ string, f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch sel.Sel.Name {
			case "Skip", "Skipf", "SkipNow":
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "testenv" {
					return true
				}
				rel, _ := filepath.Rel(root, fset.Position(call.Pos()).Filename)
				t.Errorf("%s:%d: %s skips on its own: call testenv.Unavailable (a missing prerequisite: fails in CI) or testenv.NotApplicable (naming the test that covers it here)",
					rel, fset.Position(call.Pos()).Line, sel.Sel.Name)
			}
			return true
		})
	})
	if files < 50 {
		t.Fatalf("read %d test files under %s: is that the module?", files, root)
	}
}

// environmentChecks are the calls whose answer says what the host or the
// run allows: a test that returns on one has skipped without a word.
var environmentChecks = map[string]bool{
	"os.Getenv": true, "os.LookupEnv": true, "os.Geteuid": true, "os.Getuid": true, "exec.LookPath": true,
	"unix.Capget": true, "os.Stat": true, "runtime.NumCPU": true, "unix.Uname": true,
}

// A test function that returns early on the environment (an `if` on an
// environment variable, the user, a tool's presence, a file's, the CPUs)
// with nothing but `return` passes silently where it should have said why:
// it goes through testenv too.
func TestNoQuietReturnOnTheEnvironment(t *testing.T) {
	root := moduleRoot()
	fset := token.NewFileSet()
	own := filepath.Join(root, "internal", "testenv")
	walkGo(t, fset, func(path string) bool {
		return strings.HasSuffix(path, "_test.go") && filepath.Dir(path) != own
	}, func(_ string, f *ast.File) {
		for _, p := range quietReturns(fset, f) {
			rel, _ := filepath.Rel(root, p.Filename)
			t.Errorf("%s:%d: returns on the environment without a word: call testenv.Unavailable (a missing prerequisite: fails in CI) or testenv.NotApplicable", rel, p.Line)
		}
	})
	// The check itself, on the shapes it must catch and those it must not.
	src := `package x
func TestA(t *testing.T) {
	if os.Getenv("CI") == "" {
		return
	}
	if _, err := exec.LookPath("promtool"); err != nil {
		return
	}
	if os.Geteuid() != 0 {
		t.Fatal("root")
	}
	go func() {
		if os.Getenv("X") != "" {
			return
		}
	}()
	if len(os.Args) > 1 {
		return
	}
}
func helper(n int) {
	if os.Getenv("X") == "" {
		return
	}
}
`
	f, err := parser.ParseFile(fset, "x_test.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var lines []int
	for _, p := range quietReturns(fset, f) {
		lines = append(lines, p.Line)
	}
	if !slices.Equal(lines, []int{3, 6}) {
		t.Errorf("quiet returns found at lines %v of the sample; want 3 and 6 (an env check, a tool's presence)", lines)
	}
}

// quietReturns are the `if` statements of f's test functions (those taking
// a *testing.T) that ask the environment and do nothing but return.
func quietReturns(fset *token.FileSet, f *ast.File) []token.Position {
	var out []token.Position
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil || !takesTestingT(fn) {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if _, ok := n.(*ast.FuncLit); ok {
				return false // a closure's return leaves the closure only
			}
			st, ok := n.(*ast.IfStmt)
			if !ok || len(st.Body.List) != 1 || !asksTheEnvironment(st.Cond) && !asksTheEnvironment(st.Init) {
				return true
			}
			if ret, ok := st.Body.List[0].(*ast.ReturnStmt); ok && len(ret.Results) == 0 {
				out = append(out, fset.Position(st.Pos()))
			}
			return true
		})
	}
	return out
}

// takesTestingT says whether fn has a *testing.T parameter.
func takesTestingT(fn *ast.FuncDecl) bool {
	for _, p := range fn.Type.Params.List {
		if star, ok := p.Type.(*ast.StarExpr); ok {
			if sel, ok := star.X.(*ast.SelectorExpr); ok && sel.Sel.Name == "T" {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "testing" {
					return true
				}
			}
		}
	}
	return false
}

// asksTheEnvironment says whether n calls one of environmentChecks.
func asksTheEnvironment(n ast.Node) bool {
	if n == nil {
		return false
	}
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return !found
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && environmentChecks[x.Name+"."+sel.Sel.Name] {
				found = true
			}
		}
		return !found
	})
	return found
}

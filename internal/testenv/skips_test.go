package testenv

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
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

package testenv

import (
	"go/ast"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines bounds a function, from its func line to its closing brace:
// one longer does more than one job, and its parts want names of their own.
const maxFuncLines = 60

// No function of the project's code (tests and generated code aside) is
// longer than maxFuncLines.
func TestNoFunctionTooLong(t *testing.T) {
	root := moduleRoot()
	fset := token.NewFileSet()
	funcs := 0
	walkGo(t, fset, func(path string) bool {
		return !strings.HasSuffix(path, "_test.go") && !strings.HasSuffix(path, "_bpfel.go")
	}, func(path string, f *ast.File) {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			funcs++
			if n := fset.Position(fn.Body.Rbrace).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s: %s is %d lines long, more than %d: split it into steps with names", rel, fn.Name.Name, n, maxFuncLines)
			}
		}
	})
	if funcs < 500 {
		t.Fatalf("read %d functions under %s: is that the module?", funcs, root)
	}
}

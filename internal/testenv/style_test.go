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

// maxFuncLines bounds a function's body: one longer does more than one
// job, and its parts want names of their own.
const maxFuncLines = 60

// No function of the project's code (tests and generated code aside) has a
// body longer than maxFuncLines.
func TestNoFunctionTooLong(t *testing.T) {
	root := moduleRoot()
	fset := token.NewFileSet()
	funcs := 0
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
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, "_bpfel.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			funcs++
			if n := fset.Position(fn.Body.Rbrace).Line - fset.Position(fn.Body.Lbrace).Line - 1; n > maxFuncLines {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s: %s is %d lines long, more than %d: split it into steps with names", rel, fn.Name.Name, n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if funcs < 500 {
		t.Fatalf("read %d functions under %s: is that the module?", funcs, root)
	}
}

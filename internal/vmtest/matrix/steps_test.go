package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/thrashscope/thrashscope/internal/vmtest"
)

// Each step's package exists, and each test it runs is one of its tests:
// a package moved or a test renamed would leave the matrix running
// nothing there and passing.
func TestStepsNameRealTests(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	for _, s := range Steps {
		if s.Package == "" {
			continue
		}
		files, _ := filepath.Glob(filepath.Join(root, s.Package, "*_test.go"))
		if len(files) == 0 {
			t.Errorf("step %s: no tests in %s", s.Name, s.Package)
			continue
		}
		var src strings.Builder
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
		for i, a := range s.Args {
			if a != "-test.run" || i+1 >= len(s.Args) {
				continue
			}
			names := strings.Split(strings.Trim(s.Args[i+1], "^()$"), "|")
			for _, name := range names {
				if !regexp.MustCompile(`(?m)^func ` + name + `\(t \*testing\.T\)`).MatchString(src.String()) {
					t.Errorf("step %s: %s has no test %s", s.Name, s.Package, name)
				}
			}
		}
	}
}

// A step a kernel skips is one of the plan's: a step renamed would run
// there again unseen, or a skip meant for it would skip nothing.
func TestSkipsNameRealSteps(t *testing.T) {
	for _, k := range vmtest.Matrix {
		for _, name := range k.Skip {
			if !slices.ContainsFunc(Steps, func(s step) bool { return s.Name == name }) {
				t.Errorf("%s skips %q, which is no step of the plan", k.Name, name)
			}
		}
	}
}

// --kernels takes the matrix's own kernels by version, with their suite
// and skips, and anything else as a package of the default suite.
func TestKernelNamed(t *testing.T) {
	for _, k := range vmtest.Matrix {
		v, _, _ := strings.Cut(k.Name, " ")
		if got := kernelNamed(v); got.Name != k.Name || got.Suite != k.Suite || !slices.Equal(got.Skip, k.Skip) {
			t.Errorf("kernelNamed(%q) = %+v, want the matrix's %+v", v, got, k)
		}
	}
	if got := kernelNamed("linux-image-6.1.0-56-amd64"); got.Package != "linux-image-6.1.0-56-amd64" || got.Suite != "" {
		t.Errorf("a package name gave %+v, want that package of the default suite", got)
	}
}

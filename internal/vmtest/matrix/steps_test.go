package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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

package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The package comment lists one file per job: each file of the package is
// there, and each named there exists.
func TestDocListsEveryFile(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for l := range strings.Lines(string(doc)) {
		if f := strings.Fields(strings.TrimPrefix(l, "//")); len(f) > 1 && strings.HasSuffix(f[0], ".go") {
			listed[f[0]] = true
		}
	}
	for _, f := range files {
		if f == "doc.go" || strings.HasSuffix(f, "_test.go") {
			continue
		}
		if !listed[f] {
			t.Errorf("%s is not in doc.go's list of the package's files", f)
		}
		delete(listed, f)
	}
	for f := range listed {
		t.Errorf("doc.go lists %s, which is not in the package", f)
	}
}

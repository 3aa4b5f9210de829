package procfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixtures are the committed trees every system source must work on.
var fixtures = []string{"testdata/proc", "testdata/proc-nopsi"}

func newTestFS(t testing.TB, path string) FS {
	t.Helper()
	fs, err := NewFS(path)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// writeTree builds a procfs tree from path → content, for cases too broken
// to commit as realistic fixtures.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestNewFSError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"testdata/does-not-exist", file} {
		_, err := NewFS(path)
		if err == nil {
			t.Fatalf("NewFS(%q): want error", path)
		}
		if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "--path.procfs") {
			t.Errorf("NewFS(%q) error %q should name the path and --path.procfs", path, msg)
		}
	}
}

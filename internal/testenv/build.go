package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var builds sync.Map // command name → *built

type built struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// Binary builds one of the project's commands (observer, loadgen) once per
// test process and returns its path. Privileged tests run the real
// binaries, as a user would.
func Binary(t testing.TB, name string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(name, &built{})
	b := v.(*built)
	b.once.Do(func() {
		// One fixed directory, overwritten by each build, so test runs do
		// not pile up binaries.
		dir := filepath.Join(os.TempDir(), "thrashscope-test-bin")
		if b.err = os.MkdirAll(dir, 0o755); b.err != nil {
			return
		}
		b.path = filepath.Join(dir, name)
		tmp := b.path + ".new"
		cmd := exec.Command("go", "build", "-o", tmp, "./cmd/"+name)
		cmd.Dir = moduleRoot()
		if b.out, b.err = cmd.CombinedOutput(); b.err == nil {
			b.err = os.Rename(tmp, b.path)
		}
	})
	if b.err != nil {
		t.Fatalf("building %s: %v\n%s", name, b.err, b.out)
	}
	return b.path
}

// BinaryDir is a directory holding both observer and loadgen, so the
// observer finds its consumer binary beside itself.
func BinaryDir(t testing.TB) string {
	t.Helper()
	Binary(t, "loadgen")
	return filepath.Dir(Binary(t, "observer"))
}

func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

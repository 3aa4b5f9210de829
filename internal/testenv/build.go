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

// BinariesEnv names a directory of the project's commands built already.
const BinariesEnv = "THRASHSCOPE_BINARIES"

type built struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// Binary builds one of the project's commands (observer, loadgen) once per
// test process and returns its path. Privileged tests run the real
// binaries, as a user would.
//
// Where BinariesEnv names a directory (a test VM has no Go toolchain), the
// binaries built there are used as they are.
func Binary(t testing.TB, name string) string {
	t.Helper()
	if dir := os.Getenv(BinariesEnv); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s holds no %s: %v", BinariesEnv, dir, name, err)
		}
		return p
	}
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

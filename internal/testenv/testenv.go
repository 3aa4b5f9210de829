// Package testenv holds what thrashscope's privileged tests share: the gate
// that skips them off root (and fails them in CI), a swap check, and a
// memory-limited cgroup that the test creates and removes itself.
package testenv

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// RequireEnv is the variable CI sets so that privileged tests fail instead of
// skipping: a skipped proof is no proof.
const RequireEnv = "THRASHSCOPE_REQUIRE_PRIVILEGED"

// Required reports whether missing privileges or kernel features must fail.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// skipOrFail skips with the reason, or fails under RequireEnv.
func skipOrFail(t testing.TB, reason string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s (and %s=1 forbids skipping)", reason, RequireEnv)
	}
	t.Skip(reason)
}

// RequirePrivileged skips a test that needs root unless RequireEnv is set.
func RequirePrivileged(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "needs root to load BPF programs and create cgroups")
	}
}

// RequireSwap skips a test that needs swap unless RequireEnv is set.
func RequireSwap(t testing.TB) {
	t.Helper()
	b, err := os.ReadFile("/proc/swaps")
	if err != nil || bytes.Count(b, []byte("\n")) < 2 {
		skipOrFail(t, "needs swap: enable a swap file (fallocate, mkswap, swapon) as .ci/run does")
	}
}

// RequireTool skips a test whose external tool is missing unless RequireEnv is set.
func RequireTool(t testing.TB, name, pkg string) string {
	t.Helper()
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	skipOrFail(t, fmt.Sprintf("needs %s: apt-get install %s", name, pkg))
	return ""
}

// UncachedFile writes size random bytes to a file on a disk-backed
// filesystem and drops it from the page cache, so that reading it back takes
// major faults. The file goes when the test ends.
func UncachedFile(t testing.TB, size int) string {
	t.Helper()
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.TMPFS_MAGIC {
		// tmpfs pages cannot be dropped from the cache; use a disk.
		var err error
		if dir, err = os.MkdirTemp("/var/tmp", "thrashscope-test-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	path := filepath.Join(dir, "faults.dat")
	buf := make([]byte, size)
	_, _ = rand.Read(buf)
	if err := os.WriteFile(path, buf, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	return path
}

// Cgroup is a memory-limited cgroup made for one test.
type Cgroup struct {
	Path string
	v2   bool
}

// MemoryCgroup creates a cgroup with a memory limit beneath the test's own
// memory cgroup (cgroup v1 or v2) and removes it when the test ends, killing
// whatever is still inside.
func MemoryCgroup(t testing.TB, limitBytes int64) *Cgroup {
	t.Helper()
	parent, v2, err := ownMemoryCgroup()
	if err != nil {
		t.Fatal(err)
	}
	cg := &Cgroup{Path: filepath.Join(parent, fmt.Sprintf("thrashscope-test-%d-%d", os.Getpid(), time.Now().UnixNano())), v2: v2}
	if err := os.Mkdir(cg.Path, 0o755); err != nil {
		t.Fatalf("creating test cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := cg.remove(); err != nil {
			t.Errorf("removing test cgroup %s: %v", cg.Path, err)
		}
	})
	limit := strconv.FormatInt(limitBytes, 10)
	file := "memory.limit_in_bytes"
	if v2 {
		file = "memory.max"
	}
	if err := os.WriteFile(filepath.Join(cg.Path, file), []byte(limit), 0); err != nil {
		t.Fatalf("setting %s: %v", file, err)
	}
	return cg
}

// Add moves a process into the cgroup.
func (c *Cgroup) Add(pid int) error {
	return os.WriteFile(filepath.Join(c.Path, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
}

func (c *Cgroup) pids() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(c.Path, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

func (c *Cgroup) remove() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := c.pids()
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if len(pids) == 0 {
			if err := os.Remove(c.Path); err == nil || errors.Is(err, os.ErrNotExist) {
				return nil
			} else if time.Now().After(deadline) {
				return err
			}
		} else if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still inside", pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ownMemoryCgroup finds the memory cgroup this process runs in: the v1
// memory hierarchy if mounted, else the unified one if memory is delegated.
func ownMemoryCgroup() (path string, v2 bool, err error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	var unified string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" && parts[0] == "0" {
			unified = parts[2]
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			if c == "memory" {
				return filepath.Join("/sys/fs/cgroup/memory", parts[2]), false, nil
			}
		}
	}
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		dir := filepath.Join(root, unified)
		ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		if err == nil && bytes.Contains(ctl, []byte("memory")) {
			return dir, true, nil
		}
	}
	return "", false, errors.New("no memory cgroup to nest under: mount the v1 memory controller, or delegate memory to this cgroup on cgroup v2 (memory in cgroup.subtree_control)")
}

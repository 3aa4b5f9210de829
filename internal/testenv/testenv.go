// Package testenv holds what thrashscope's privileged tests share: the gate
// that skips them off root (and fails them in CI), a swap check, and a
// memory-limited cgroup that the test creates and removes itself.
package testenv

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"
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

// Unavailable skips a test whose prerequisite is missing here (a tool, a
// mount, a kernel file), or fails it under RequireEnv: reason says what is
// missing and how to get it. A skip in this project goes through here or
// NotApplicable (TestSkipsGoThroughTestenv).
func Unavailable(t testing.TB, reason string) {
	t.Helper()
	skipOrFail(t, reason)
}

// NotApplicableMark starts the log line of a test that does not apply to
// this host, so that the kernel matrix reports it as not applicable, never
// as passed.
const NotApplicableMark = "thrashscope-not-applicable: "

// ArtifactsEnv names a directory where tests leave what CI shows after
// them (.ci/run sets it): a screenshot, and the list of the tests that did
// not apply to the host (NotApplicableFile).
const ArtifactsEnv = "THRASHSCOPE_ARTIFACTS"

// NotApplicableFile, under ArtifactsEnv's directory, lists a line per test
// that did not apply, with why: go test shows no skip without -v.
const NotApplicableFile = "not-applicable.txt"

// NotApplicable skips a test that cannot apply to this host even as root
// with every tool installed: the hazard it proves absent does not exist
// here (a cgroup v1 hazard on a pure cgroup v2 host, a file of a kernel
// newer than this one). why says so; counterpart names the test that
// covers the same ground here. It skips under RequireEnv too, and says so
// in the log (the kernel matrix reads it) and in NotApplicableFile.
func NotApplicable(t testing.TB, why, counterpart string) {
	t.Helper()
	line := fmt.Sprintf("%s; %s covers it here", why, counterpart)
	t.Log(NotApplicableMark + line)
	if dir := os.Getenv(ArtifactsEnv); dir != "" {
		f, err := os.OpenFile(filepath.Join(dir, NotApplicableFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatalf("listing a test that does not apply here: %v", err)
		}
		_, err = fmt.Fprintf(f, "%s: %s\n", t.Name(), line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatalf("listing a test that does not apply here: %v", err)
		}
	}
	t.SkipNow()
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

// RequireFreeZram returns a zram device no one uses (disksize 0), such as
// a run's swap: zram makes, and skips the test where there is none unless
// RequireEnv is set: a test of zram must not fall back to something else.
func RequireFreeZram(t testing.TB) string {
	t.Helper()
	devs, _ := filepath.Glob("/sys/block/zram*/disksize")
	for _, d := range devs {
		if b, err := os.ReadFile(d); err == nil && strings.TrimSpace(string(b)) == "0" {
			return "/dev/" + filepath.Base(filepath.Dir(d))
		}
	}
	skipOrFail(t, fmt.Sprintf("needs a free zram device (disksize 0; %d zram devices here): modprobe zram, as .ci/run does, or reset one that is not in use (swapoff, then echo 1 > /sys/block/zramN/reset)", len(devs)))
	return ""
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
	RandomFill(buf)
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
	// A page the drop misses (still queued for the LRU, or under
	// writeback) is mapped without a fault by fault-around: drop again
	// until mincore finds none resident.
	for try := 0; ; try++ {
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
		n, err := residentPages(f, size)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if try == 20 {
			t.Logf("%d pages of %s stay in the page cache", n, path)
			break
		}
		_ = f.Sync()
		time.Sleep(50 * time.Millisecond)
	}
	return path
}

// residentPages counts the pages of the file's first size bytes that are
// in the page cache (mincore on a mapping of it).
func residentPages(f *os.File, size int) (int, error) {
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(mem)
	vec := make([]byte, (size+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return 0, fmt.Errorf("mincore: %w", e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n, nil
}

// Cgroup is a memory-limited cgroup made for one test.
type Cgroup struct {
	*cgroup.Cgroup
	// Guard is its OOM guard; nil when it could not be set up.
	Guard *cgroup.OOMGuard
}

// MemoryCgroup creates a cgroup with a memory limit beneath the test's own
// memory cgroup (cgroup v1 or v2), under the OOM guard a run's cgroup has
// (cgroup.OOMGuard: a thrash this deep would otherwise lose the test's
// process to the OOM killer with swap free, on v2 in every try), and
// removes it when the test ends, killing whatever is still inside.
func MemoryCgroup(t testing.TB, limitBytes int64) *Cgroup {
	t.Helper()
	parent, err := cgroup.Own("/proc")
	if err == nil {
		err = parent.Check()
	}
	if err != nil {
		skipOrFail(t, fmt.Sprintf("needs a memory cgroup to nest the test's under: %v", err))
	}
	c, err := parent.Create(fmt.Sprintf("test-%d-%d", os.Getpid(), time.Now().UnixNano()), cgroup.Limits{MemoryBytes: limitBytes})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := c.GuardOOM(limitBytes)
	if err != nil {
		t.Logf("no OOM guard for the test's cgroup: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Destroy(ctx); err != nil {
			t.Error(err)
		}
		guard.Close()
	})
	return &Cgroup{Cgroup: c, Guard: guard}
}

// UnifiedGroup makes a group for one test in the unified hierarchy,
// beneath this process's own group there, with a freezer when freeze is
// set, and removes it (and kills what is left in it) when the test ends.
// Its memory.pressure counts only the processes put in it.
func UnifiedGroup(t testing.TB, name string, freeze bool) *cgroup.Cgroup {
	t.Helper()
	RequirePrivileged(t)
	parent, err := cgroup.OwnUnified("/proc")
	if err != nil {
		Unavailable(t, fmt.Sprintf("no cgroup2 group of this process to make the test's under: %v", err))
	}
	create := parent.CreatePressureGroup
	if freeze {
		create = parent.CreateFreezeGroup
	}
	g, err := create(fmt.Sprintf("test-%s-%d-%d", name, os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Destroy(ctx); err != nil {
			t.Error(err)
		}
	})
	return g
}

// PressureGroup is a cgroup2 group made for one test, to read the PSI of
// the processes put in it: the kernel's own memory-stall figure.
type PressureGroup struct {
	*cgroup.Cgroup
}

// NewPressureGroup gives the processes of mem a cgroup2 group whose
// memory.pressure counts only them. On cgroup v2, mem itself is that group.
// Where the memory controller is on v1 (this project's machines), a group
// is made in the unified hierarchy beneath the test's own, which has
// memory.pressure with or without the memory controller; add each process
// to both. It is removed when the test ends.
func NewPressureGroup(t testing.TB, mem *Cgroup) *PressureGroup {
	t.Helper()
	if mem.V2 {
		return &PressureGroup{mem.Cgroup}
	}
	parent, err := cgroup.OwnUnified("/proc")
	if err != nil {
		skipOrFail(t, fmt.Sprintf("needs a cgroup2 group for per-process PSI: %v", err))
	}
	g, err := parent.CreatePressureGroup(fmt.Sprintf("test-psi-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(g.Path, "memory.pressure")); err != nil {
		skipOrFail(t, fmt.Sprintf("the kernel keeps no per-group memory PSI (%v): boot with psi=1", err))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Destroy(ctx); err != nil {
			t.Error(err)
		}
	})
	return &PressureGroup{g}
}

// MemorySomeTotal reads the group's memory.pressure "some" total: the time
// at least one of its tasks was stalled on memory.
func (g *PressureGroup) MemorySomeTotal(t testing.TB) time.Duration {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(g.Path, "memory.pressure"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := pressureTotal(string(b), "some")
	if err != nil {
		t.Fatalf("%s/memory.pressure: %v", g.Path, err)
	}
	return d
}

// pressureTotal finds total=N (µs) on the line of a PSI file that starts
// with kind ("some" or "full").
func pressureTotal(text, kind string) (time.Duration, error) {
	for line := range strings.Lines(text) {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != kind {
			continue
		}
		for _, f := range fields[1:] {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				us, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("bad total %q: %w", v, err)
				}
				return time.Duration(us) * time.Microsecond, nil
			}
		}
	}
	return 0, fmt.Errorf("no %q line with a total", kind)
}

// RandomFill fills b with pseudo-random bytes, which no compressing swap
// (zswap, zram) shrinks: a PCG stream, integer arithmetic that a VM under
// TCG runs fast, where crypto/rand's SIMD-bound ChaCha20 (in the vDSO on
// Linux 6.11+) took minutes for 128 MiB.
func RandomFill(b []byte) {
	r := rand.NewPCG(uint64(len(b)), 0x9e3779b97f4a7c15)
	var w [8]byte
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		copy(b[i:], w[:])
	}
}

// FigureMark starts a test log line that carries one of the figures a
// kernel matrix tabulates (see Figure).
const FigureMark = "thrashscope-figure "

// Figure logs a measured figure under a name, as "thrashscope-figure
// name: value", so that make test-kernels can put each kernel's value in
// its table beside the test's result.
func Figure(t testing.TB, name, format string, args ...any) {
	t.Helper()
	t.Logf("%s%s: %s", FigureMark, name, fmt.Sprintf(format, args...))
}

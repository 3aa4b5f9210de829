package cgroup_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/kernfile"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// The test binary doubles as a consumer that allocates once told to, the
// pipe handshake the load generator uses on cgroup v1.
const childEnv = "THRASHSCOPE_CGROUP_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "hot" {
		hot()
		return
	}
	if os.Getenv(childEnv) == "sendfile" {
		sendAll(os.Getenv(fileEnv))
		return
	}
	if mode := os.Getenv(childEnv); mode == "alloc" || mode == "alloc-small" {
		size := 256 << 20
		if mode == "alloc-small" {
			size = 8 << 20
		}
		allocate(size)
		return
	}
	os.Exit(m.Run())
}

// allocate waits for a byte on stdin, then touches size bytes; a small
// child then waits for stdin to close.
func allocate(size int) {
	if _, err := io.ReadFull(os.Stdin, make([]byte, 1)); err != nil {
		os.Exit(2)
	}
	b := make([]byte, size)
	for i := 0; i < len(b); i += os.Getpagesize() {
		b[i] = 1
	}
	if size < 256<<20 {
		_, _ = io.ReadAll(os.Stdin) // held until the test closes stdin
		b[0]++
	}
	os.Exit(0)
}

// hot waits for a byte on stdin, then writes every page of 96 MiB in a new
// random order each pass, from two goroutines, for 10 s: pages kept as hot
// as a thrash at W=10,000 keeps them, which memcg reclaim can fail to find
// anything cold in.
func hot() {
	if _, err := io.ReadFull(os.Stdin, make([]byte, 1)); err != nil {
		os.Exit(2)
	}
	const size = 96 << 20
	page := os.Getpagesize()
	b := make([]byte, size)
	end := time.Now().Add(10 * time.Second)
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			half := b[w*size/2 : (w+1)*size/2]
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for time.Now().Before(end) {
				for _, i := range r.Perm(len(half) / page) {
					half[i*page]++
				}
			}
		})
	}
	wg.Wait()
	os.Exit(0)
}

// fileEnv names the file a sendfile child reads.
const fileEnv = "THRASHSCOPE_CGROUP_TEST_FILE"

// sendAll waits for a byte on stdin, then sends the whole file to
// /dev/null in one sendfile call: its page cache is charged in the kernel,
// chunk after chunk, with no return to user space in between, where
// memory.high's reclaim would run, so usage sits at memory.max until it
// ends.
func sendAll(path string) {
	if _, err := io.ReadFull(os.Stdin, make([]byte, 1)); err != nil {
		os.Exit(2)
	}
	in, err := os.Open(path)
	if err != nil {
		os.Exit(3)
	}
	st, _ := in.Stat()
	out, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		os.Exit(3)
	}
	if n, err := unix.Sendfile(int(out.Fd()), int(in.Fd()), nil, int(st.Size())); err != nil || int64(n) != st.Size() {
		fmt.Fprintf(os.Stderr, "sendfile: %d of %d bytes: %v\n", n, st.Size(), err)
		os.Exit(4)
	}
	os.Exit(0)
}

// allocChild starts the test binary as a child that touches 256 MiB, adds it
// to c, and tells it to go.
func allocChild(t *testing.T, c *cgroup.Cgroup) *exec.Cmd {
	t.Helper()
	cmd, _ := startAlloc(t, c, "alloc")
	return cmd
}

// startAlloc starts the test binary as an allocating child of the mode,
// adds it to c, and tells it to go; stdin is the child's.
func startAlloc(t *testing.T, c *cgroup.Cgroup, mode string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.Add(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	return cmd, stdin
}

// ownParent is the test's own memory cgroup, checked.
func ownParent(t *testing.T) cgroup.Parent {
	t.Helper()
	testenv.RequirePrivileged(t)
	p, err := cgroup.Own("/proc")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	return p
}

// uniqueName keeps concurrent test binaries in the same parent apart.
func uniqueName(what string) string {
	return fmt.Sprintf("%s-%d-%d", what, os.Getpid(), time.Now().UnixNano())
}

// create makes a cgroup that is destroyed when the test ends, whatever happens.
func create(t *testing.T, p cgroup.Parent, name string, l cgroup.Limits) *cgroup.Cgroup {
	t.Helper()
	c, err := p.Create(name, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroy(t, c) })
	return c
}

func destroy(t *testing.T, c *cgroup.Cgroup) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Destroy(ctx); err != nil {
		t.Error(err)
	}
}

// sleeper starts `sleep 60`, reaped in the background; the returned channel
// yields its exit, then closes.
func sleeper(t *testing.T, attr *syscall.SysProcAttr) (*exec.Cmd, <-chan error) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	return cmd, done
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestCreateAddDestroy(t *testing.T) {
	p := ownParent(t)
	const limit = 64 << 20
	c := create(t, p, uniqueName("test"), cgroup.Limits{MemoryBytes: limit})
	if want := filepath.Join(p.Path, cgroup.Prefix); !strings.HasPrefix(c.Path, want) || c.V2 != p.V2 {
		t.Fatalf("created %+v, want a cgroup %s* with V2=%v", c, want, p.V2)
	}
	if got, err := c.MemoryLimit(); err != nil || got != limit {
		t.Fatalf("MemoryLimit() = %d, %v; want %d", got, err, limit)
	}
	if got, err := c.OOMKills(); err != nil || got != 0 {
		t.Errorf("OOMKills() of a new cgroup = %d, %v; want 0", got, err)
	}

	cmd, done := sleeper(t, nil)
	if err := c.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if pids, err := c.PIDs(); err != nil || !slices.Equal(pids, []int{cmd.Process.Pid}) {
		t.Fatalf("PIDs() = %v, %v; want [%d]", pids, err, cmd.Process.Pid)
	}
	// v1 leaves a moved process's charges behind, so usage may be 0.
	if got, err := c.MemoryUsage(); err != nil || got < 0 || got > limit {
		t.Errorf("MemoryUsage() = %d, %v; want in [0, %d]", got, err, limit)
	}
	opened, err := cgroup.Open(c.Path, c.V2)
	if err != nil || opened.Path != c.Path || opened.V2 != c.V2 {
		t.Fatalf("Open(%s) = %+v, %v; want %+v", c.Path, opened, err, c)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := opened.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Destroy took %v", time.Since(start))
	if exists(c.Path) {
		t.Errorf("%s still exists after Destroy", c.Path)
	}
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("sleep ended with %v, want SIGKILL", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("sleep still running after Destroy")
	}
	if err := c.Destroy(ctx); err != nil {
		t.Errorf("second Destroy: %v, want nil", err)
	}
}

// TestOpenProcsJoin: a child given the opened cgroup.procs joins by
// writing "0", with no rights of its own needed beyond the descriptor.
func TestOpenProcsJoin(t *testing.T) {
	p := ownParent(t)
	c := create(t, p, uniqueName("join"), cgroup.Limits{MemoryBytes: 64 << 20})
	procs, err := c.OpenProcs()
	if err != nil {
		t.Fatal(err)
	}
	defer procs.Close()
	cmd := exec.Command("sh", "-c", "printf 0 >&3 && exec sleep 60")
	cmd.ExtraFiles = []*os.File{procs}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids, err := c.PIDs()
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(pids, []int{cmd.Process.Pid}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PIDs() = %v 5 s after the child wrote 0; want [%d]", pids, cmd.Process.Pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := (&cgroup.Cgroup{Path: t.TempDir()}).OpenProcs(); err == nil || !strings.Contains(err.Error(), "not made by thrashscope") {
		t.Errorf("OpenProcs on a foreign cgroup: %v, want a refusal", err)
	}
}

func TestDestroyNestedExpired(t *testing.T) {
	p := ownParent(t)
	c := create(t, p, uniqueName("test"), cgroup.Limits{MemoryBytes: 64 << 20})
	// A nested cgroup we did not empty through Destroy's own cgroup.procs:
	// Destroy must find it.
	nested := filepath.Join(c.Path, "inner")
	if err := os.Mkdir(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd, exited := sleeper(t, nil)
	if err := os.WriteFile(filepath.Join(nested, "cgroup.procs"), fmt.Appendf(nil, "%d", cmd.Process.Pid), 0); err != nil {
		t.Fatal(err)
	}
	// An expired context still gets one round: either it was enough, or
	// the error names what was left, and a second Destroy finishes.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := c.Destroy(ctx)
	t.Logf("Destroy with an expired context: %v", err)
	if err != nil {
		if !strings.Contains(err.Error(), fmt.Sprint(cmd.Process.Pid)) && !strings.Contains(err.Error(), "removing") {
			t.Errorf("Destroy with an expired context: %v; want the pid %d or the removal named", err, cmd.Process.Pid)
		}
		destroy(t, c)
	}
	// Either way nothing is left: both cgroups gone, the process inside
	// killed.
	if exists(nested) || exists(c.Path) {
		t.Errorf("%s or %s still exists", nested, c.Path)
	}
	select {
	case err := <-exited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("the process in the nested cgroup ended with %v, want SIGKILL from Destroy", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the process in the nested cgroup still runs 10 s after its cgroup was destroyed")
	}
}

func TestSweep(t *testing.T) {
	p := ownParent(t)
	run := uniqueName("sweep")
	stale := create(t, p, run+"-run-1", cgroup.Limits{MemoryBytes: 64 << 20})
	cmd, done := sleeper(t, nil)
	if err := stale.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	// Siblings Sweep must leave: one without the prefix, one with it but
	// another name.
	foreign := filepath.Join(p.Path, run+"-run-foreign")
	if err := os.Mkdir(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(foreign); err != nil {
			t.Error(err)
		}
	})
	other := create(t, p, "other-"+run, cgroup.Limits{MemoryBytes: 64 << 20})
	// A run cgroup whose owner lives (here: this process still holds it)
	// is left alone, whatever its name; the stale one's owner is gone.
	held := create(t, p, run+"-run-2", cgroup.Limits{MemoryBytes: 64 << 20})
	stale.Forget()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	removed, err := p.Sweep(ctx, run+"-run-")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{stale.Path}) {
		t.Errorf("Sweep removed %v, want [%s]", removed, stale.Path)
	}
	if exists(stale.Path) {
		t.Errorf("%s survived Sweep", stale.Path)
	}
	for _, keep := range []string{foreign, other.Path, held.Path} {
		if !exists(keep) {
			t.Errorf("Sweep removed %s", keep)
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("the process in the swept cgroup is still running")
	}
}

func TestCreateInvalidLimitLeavesNothing(t *testing.T) {
	p := ownParent(t)
	limitFile := "memory.limit_in_bytes"
	if p.V2 {
		limitFile = "memory.max"
	}
	name := uniqueName("test")
	path := filepath.Join(p.Path, cgroup.Prefix+name)
	if c, err := p.Create(name, cgroup.Limits{MemoryBytes: -5}); err == nil {
		destroy(t, c)
		t.Fatal("Create with a negative limit succeeded")
	}
	if exists(path) {
		t.Errorf("%s left behind by a refused Create", path)
	}
	// The kernel rejects these after the mkdir: Create must rmdir.
	for _, value := range []string{"-5", "lots"} {
		c, err := p.CreateWith(name, [2]string{limitFile, value})
		if err == nil {
			destroy(t, c)
			t.Fatalf("writing %q to %s succeeded", value, limitFile)
		}
		t.Logf("%q: %v", value, err)
		if !strings.Contains(err.Error(), "creating cgroup "+path) || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("error %q: want the cgroup named and EINVAL", err)
		}
		if exists(path) {
			t.Errorf("%s left behind after the kernel refused %q", path, value)
		}
	}
}

// TestOOMKills drives a consumer past its limit with swap out of reach, so the
// OOM killer must take it; in the group itself, and in a consumer's
// sub-group, as a run places each (v1 counts the victim in its own group
// alone, and the run's group is the one read).
func TestOOMKills(t *testing.T) {
	for _, sub := range []bool{false, true} {
		t.Run(map[bool]string{false: "in the group", true: "in a consumer's sub-group"}[sub], func(t *testing.T) {
			p := ownParent(t)
			c := create(t, p, uniqueName("test"), cgroup.Limits{MemoryBytes: 32 << 20})
			// Our own cgroup, so ours to tune: without swap the limit is
			// hard. Before the child is made: v1 gives it its parent's
			// swappiness then.
			noSwap := [2]string{"memory.swappiness", "0"}
			if p.V2 {
				noSwap = [2]string{"memory.swap.max", "0"}
			}
			if err := os.WriteFile(filepath.Join(c.Path, noSwap[0]), []byte(noSwap[1]), 0); err != nil {
				t.Fatal(err)
			}
			in := c
			if sub {
				ch, err := c.Child("consumer-00")
				if err != nil {
					t.Fatal(err)
				}
				in = ch
			}
			cmd := allocChild(t, in)
			err := cmd.Wait()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("consumer ended with %v, want killed by the OOM killer", err)
			}
			n, err := c.OOMKills()
			if err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Errorf("OOMKills() = %d after one OOM kill, want 1", n)
			}
		})
	}
}

func TestParentAt(t *testing.T) {
	p := ownParent(t)
	got, err := cgroup.ParentAt(p.Path + "/")
	if err != nil || got != p {
		t.Errorf("ParentAt(%s) = %+v, %v; want %+v", p.Path, got, err, p)
	}
	for _, bad := range []string{t.TempDir(), filepath.Join(p.Path, "no-such-cgroup")} {
		if _, err := cgroup.ParentAt(bad); !errors.Is(err, cgroup.ErrUnusable) {
			t.Errorf("ParentAt(%s) = %v, want ErrUnusable", bad, err)
		}
	}
}

// TestV2WithoutMemory runs the v2 mechanics (cgroup.kill, CgroupFD, Sweep) on
// the unified hierarchy even where memory is not on it, as on hybrid hosts.
func TestV2WithoutMemory(t *testing.T) {
	testenv.RequirePrivileged(t)
	p, ok := cgroup.OwnV2("/proc")
	if !ok {
		testenv.Unavailable(t, "no cgroup v2 mount: mount cgroup2 (at /sys/fs/cgroup/unified on a hybrid host)")
	}
	if err := p.Check(); err == nil {
		t.Log("memory is enabled on this v2 parent; the message check does not apply")
	} else if !errors.Is(err, cgroup.ErrUnusable) || !strings.Contains(err.Error(), "enable memory in "+p.Path+"/cgroup.subtree_control, or set --cgroup.parent to a delegated cgroup (systemd Delegate=yes)") {
		t.Errorf("Check() = %v, want the fix named", err)
	} else {
		name := uniqueName("test")
		if _, err := p.Create(name, cgroup.Limits{MemoryBytes: 64 << 20}); err == nil || exists(filepath.Join(p.Path, cgroup.Prefix+name)) {
			t.Errorf("Create without memory enabled: %v, want an error and no directory", err)
		}
	}

	run := uniqueName("v2")
	c, err := p.CreateWith(run + "-run-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroy(t, c) })
	fd, err := c.FD()
	if err != nil {
		t.Fatal(err)
	}
	cmd, done := sleeper(t, &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd})
	syscall.Close(fd)
	if pids, err := c.PIDs(); err != nil || !slices.Equal(pids, []int{cmd.Process.Pid}) {
		t.Fatalf("PIDs() = %v, %v; want [%d], started inside through the FD", pids, err, cmd.Process.Pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.Forget() // as if its owner had died
	removed, err := p.Sweep(ctx, run+"-run-")
	if err != nil || !slices.Equal(removed, []string{c.Path}) {
		t.Fatalf("Sweep = %v, %v; want [%s]", removed, err, c.Path)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("sleep survived the v2 Destroy")
	}
}

func TestFDOnV1(t *testing.T) {
	c := &cgroup.Cgroup{Path: "/sys/fs/cgroup/memory/" + cgroup.Prefix + "x"}
	if _, err := c.FD(); err == nil {
		t.Error("FD on cgroup v1 succeeded")
	}
}

// TestOOMGuard parks a task on a failed charge instead of killing it, and
// lets it go on once the guard's reclaim can free memory: the child's
// charges fail while the cgroup may not swap (swappiness 0), the guard
// rescues in vain, the child waits alive; once swap is allowed, a rescue
// reclaims and the child finishes its 256 MiB in a 32 MiB cgroup, with no
// OOM kill.
func TestOOMGuard(t *testing.T) {
	p := ownParent(t)
	testenv.RequireSwap(t)
	if p.V2 {
		testOOMGuardV2(t, p)
		return
	}
	const limit = 32 << 20
	c := create(t, p, uniqueName("test"), cgroup.Limits{MemoryBytes: limit})
	swappiness := filepath.Join(c.Path, "memory.swappiness")
	if err := os.WriteFile(swappiness, []byte("0"), 0); err != nil {
		t.Fatal(err)
	}
	g, err := c.GuardOOM(limit)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	control, _ := os.ReadFile(filepath.Join(c.Path, "memory.oom_control"))
	if !strings.Contains(string(control), "oom_kill_disable 1") {
		t.Fatalf("memory.oom_control after GuardOOM:\n%s", control)
	}

	cmd := allocChild(t, c)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// Nothing can be reclaimed: the guard tries, the child waits.
	deadline := time.Now().Add(10 * time.Second)
	for g.Rescues() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s the guard rescued %d times, want the child parked and rescued", g.Rescues())
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("the child ended (%v) while nothing could be reclaimed; want it parked", err)
	default:
	}
	if got, err := c.MemoryLimit(); err != nil || got != limit {
		t.Errorf("limit %d (%v) between rescues, want %d", got, err, limit)
	}

	// Swap allowed: a rescue reclaims, and the child finishes.
	if err := os.WriteFile(swappiness, []byte("60"), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the child ended with %v, want it to finish", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the child did not finish within 60 s of swap being allowed")
	}
	if n, err := c.OOMKills(); err != nil || n != 0 {
		t.Errorf("OOMKills() = %d, %v; want none", n, err)
	}
	// Each rescue lowers the limit, and the kernel reclaims in the
	// writer: the guard's thread has spent CPU on it.
	if g.CPU() <= 0 {
		t.Errorf("the guard rescued %d times on %s of CPU, want its reclaim counted", g.Rescues(), g.CPU())
	}
	testenv.Figure(t, "OOM guard", "v1: parked and rescued %d times on %s of the guard's CPU, no OOM kill", g.Rescues(), g.CPU())
}

// A parked task is killable: Destroy leaves nothing behind.
// A reclaim the kernel cannot do comes back: memory.reclaim of a memory
// cgroup with nothing in it fails with EAGAIN, and the v2 guard's rescue
// says so at once. Written through package os, that EAGAIN parked the guard
// in Go's poller for good (kernfs files poll, so os makes them
// non-blocking, and kernfs never signals them writable): on Linux 6.1 a run
// under a slow swap device, whose reclaim made no progress, never ended.
func TestReclaimOfNothingComesBack(t *testing.T) {
	p := ownParent(t)
	if !p.V2 {
		testenv.NotApplicable(t, "memory.reclaim, which the v2 guard rescues with, is cgroup v2's, and the memory controller here is on v1 (the kernel matrix runs this on v2)", "TestOOMGuard (the v1 guard, which rescues through the limit)")
	}
	const limit = 32 << 20
	c := create(t, p, uniqueName("test"), cgroup.Limits{MemoryBytes: limit})
	reclaim := filepath.Join(c.Path, "memory.reclaim")
	if _, err := os.Stat(reclaim); err != nil {
		testenv.NotApplicable(t, fmt.Sprintf("no memory.reclaim before Linux 5.19 (%v): the v2 guard throttles through memory.high alone and writes nothing that can park", err), "TestOOMGuard")
	}
	g, err := c.GuardOOM(limit)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	type answer struct {
		write  error
		rescue bool
	}
	done := make(chan answer, 1)
	go func() {
		err := kernfile.WriteFile(reclaim, []byte("1048576"))
		done <- answer{err, g.RescueV2()}
	}()
	select {
	case a := <-done:
		if !errors.Is(a.write, syscall.EAGAIN) {
			t.Errorf("memory.reclaim of an empty cgroup: %v, want EAGAIN", a.write)
		}
		if a.rescue || g.Rescues() != 0 {
			t.Errorf("the guard's rescue of an empty cgroup returned %v with %d rescues counted: want false, none", a.rescue, g.Rescues())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("memory.reclaim of an empty cgroup has not come back in 30 s: the writer is parked")
	}
}

func TestOOMGuardDestroyParked(t *testing.T) {
	p := ownParent(t)
	if p.V2 {
		testenv.NotApplicable(t, "memory is on cgroup v2, which has no oom_kill_disable: no task parks on a failed charge", "TestOOMGuard (the v2 guard) and TestCreateAddDestroy")
	}
	const limit = 32 << 20
	c, err := p.Create(uniqueName("test"), cgroup.Limits{MemoryBytes: limit, NoSwap: true})
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.GuardOOM(limit)
	if err != nil {
		t.Fatal(err)
	}
	cmd := allocChild(t, c)
	deadline := time.Now().Add(10 * time.Second)
	for g.Rescues() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if g.Rescues() == 0 {
		t.Error("the child never parked")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	g.Close()
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("parked child ended with %v, want SIGKILL from Destroy", err)
	}
	if exists(c.Path) {
		t.Errorf("%s left behind", c.Path)
	}
}

// A child cgroup holds one process under its parent's limit, and the
// parent's Destroy removes both, killing what is inside.
func TestChildUnderTheLimit(t *testing.T) {
	p := ownParent(t)
	const limit = 64 << 20
	c, err := p.Create(uniqueName("test"), cgroup.Limits{MemoryBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.Child("consumer-00")
	if err != nil {
		destroy(t, c)
		t.Fatal(err)
	}
	if filepath.Dir(ch.Path) != c.Path || !strings.HasPrefix(filepath.Base(ch.Path), cgroup.Prefix) {
		t.Errorf("child at %s, want a %s... directory in %s", ch.Path, cgroup.Prefix, c.Path)
	}
	if _, err := c.Child("a/b"); err == nil {
		t.Error("a child name with '/' was accepted")
	}
	// A process that allocates once in the child: its pages are charged
	// to the child and so to the parent (a process moved in brings none
	// of its earlier charges on cgroup v2).
	cmd, stdin := startAlloc(t, ch, "alloc-small")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); close(done) }()
	t.Cleanup(func() { stdin.Close(); _ = cmd.Process.Kill(); <-done })
	if pids, _ := ch.PIDs(); len(pids) != 1 || pids[0] != cmd.Process.Pid {
		t.Errorf("child holds %v, want the allocating process %d", pids, cmd.Process.Pid)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		usage, err := c.MemoryUsage()
		if err == nil && usage >= 8<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the parent's usage is %d (%v) with 8 MiB allocated in its child; want it charged there", usage, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("the sleeper in the child outlived the parent's Destroy")
	}
	if exists(ch.Path) || exists(c.Path) {
		t.Errorf("%s or %s left behind", ch.Path, c.Path)
	}
}

// On cgroup v2 the guard cannot park a task as v1's does: it keeps charges
// from failing at memory.max. A workload that keeps every page hot in a
// cgroup a third its size is run without the guard, then with it: with it,
// it ends of itself, no task OOM-killed. Whether the bare run is killed
// depends on the machine (under TCG it is not), and memory.high's own
// throttling keeps usage off max, so the guard's reclaim is a backstop for
// when the tasks' reclaim falls behind. That is made to happen: memory.high
// is taken off again under the guard, and a reader's page cache fills the
// cgroup to memory.max; the guard must reclaim for it.
func testOOMGuardV2(t *testing.T, p cgroup.Parent) {
	const limit = 32 << 20
	hotRun := func(guarded bool) (killed bool, g *cgroup.OOMGuard) {
		c := create(t, p, uniqueName("test"), cgroup.Limits{MemoryBytes: limit})
		if guarded {
			var err error
			if g, err = c.GuardOOM(limit); err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			high, _ := os.ReadFile(filepath.Join(c.Path, "memory.high"))
			// The slack: 1/256 of the limit, at least 1 MiB.
			if got := strings.TrimSpace(string(high)); got != strconv.Itoa(limit-(1<<20)) {
				t.Errorf("memory.high %s under the guard, want 1 MiB below the %d limit", got, limit)
			}
		}
		cmd, _ := startAlloc(t, c, "hot")
		err := cmd.Wait()
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL {
			n, _ := c.OOMKills()
			return n > 0, g
		}
		if err != nil {
			t.Fatalf("the hot workload ended with %v", err)
		}
		return false, g
	}
	killedBare, _ := hotRun(false)
	t.Logf("without the guard the hot workload was OOM-killed: %v", killedBare)
	killed, g := hotRun(true)
	if killed {
		t.Errorf("under the guard the hot workload was OOM-killed")
	}
	hotRescues := g.Rescues()

	file := testenv.UncachedFile(t, 3*limit)
	c := create(t, p, uniqueName("test"), cgroup.Limits{MemoryBytes: limit})
	sg, err := c.GuardOOM(limit)
	if err != nil {
		t.Fatal(err)
	}
	defer sg.Close()
	if err := os.WriteFile(filepath.Join(c.Path, "memory.high"), []byte("max"), 0); err != nil {
		t.Fatal(err)
	}
	t.Setenv(fileEnv, file)
	cmd, _ := startAlloc(t, c, "sendfile")
	if err := cmd.Wait(); err != nil {
		n, _ := c.OOMKills()
		t.Errorf("the reader held at memory.max ended with %v (%d OOM kills)", err, n)
	}
	if sg.Reclaims() && sg.Rescues() == 0 {
		t.Errorf("the guard never reclaimed for a reader that filled its cgroup to memory.max")
	}
	testenv.Figure(t, "OOM guard", "v2: hot workload OOM-killed bare %v, guarded %v (%d rescues); reader filling to max rescued %d times (memory.reclaim: %v)",
		killedBare, killed, hotRescues, sg.Rescues(), sg.Reclaims())
}

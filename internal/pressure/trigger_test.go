package pressure

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// thrashEnv makes the test binary a child that rewrites the number of MiB
// it names, page by page, until killed.
const thrashEnv = "THRASHSCOPE_PRESSURE_THRASH_MIB"

func TestMain(m *testing.M) {
	if mib := os.Getenv(thrashEnv); mib != "" {
		n, _ := strconv.Atoi(mib)
		buf := make([]byte, n<<20)
		for i := 0; ; i = (i + 4096) % len(buf) {
			buf[i]++
		}
	}
	os.Exit(m.Run())
}

func TestOpenRefusesWhatTheKernelWould(t *testing.T) {
	for _, tc := range []struct {
		stall, window time.Duration
		want          string
	}{
		{100 * time.Millisecond, 100 * time.Millisecond, "window 100ms outside"},
		{time.Second, 20 * time.Second, "window 20s outside"},
		{0, time.Second, "stall 0s must be positive"},
		{2 * time.Second, time.Second, "at most the window"},
	} {
		_, err := Open("/proc/pressure/memory", tc.stall, tc.window)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(stall %v, window %v) = %v, want an error saying %q", tc.stall, tc.window, err, tc.want)
		}
	}
	_, err := Open("/nonexistent/memory.pressure", 100*time.Millisecond, time.Second)
	if err == nil || !strings.Contains(err.Error(), "no PSI") {
		t.Errorf("Open on a missing file = %v, want an error naming PSI", err)
	}
}

// A trigger on a real group's memory.pressure stays quiet while its
// process sleeps, and fires within a second of the process starting to
// thrash under a memory limit with swap; Close returns and leaves no
// goroutine polling.
func TestTriggerFiresOnARealThrash(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	cg := testenv.MemoryCgroup(t, 32<<20)
	pg := testenv.NewPressureGroup(t, cg)
	// Without CAP_SYS_RESOURCE (this project's VMs lack it) the kernel
	// takes only whole 2 s windows, which its averaging worker checks
	// every 2 s; with it, the shortest.
	window := MinWindow
	trig, err := Open(pg.Cgroup.Path+"/memory.pressure", 50*time.Millisecond, window)
	if err != nil && strings.Contains(err.Error(), "CAP_SYS_RESOURCE") {
		t.Logf("%v: a 2 s window instead", err)
		window = 2 * time.Second
		trig, err = Open(pg.Cgroup.Path+"/memory.pressure", 50*time.Millisecond, window)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer trig.Close()

	select {
	case <-trig.C:
		t.Fatal("the trigger fired on an empty group")
	case <-time.After(time.Second):
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), thrashEnv+"=64")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for _, g := range []*cgroup.Cgroup{cg.Cgroup, pg.Cgroup} {
		if err := g.Add(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	select {
	case <-trig.C:
		testenv.Figure(t, "PSI trigger", "fired %v after a thrash began (50 ms of stall in %v)", time.Since(start).Round(time.Millisecond), window)
	case <-time.After(10 * time.Second):
		t.Fatalf("no wake in 10 s of a thrash; group PSI some %v", pg.MemorySomeTotal(t))
	}
	if time.Since(start) > window+2*time.Second {
		t.Errorf("the trigger fired %v after the thrash began, want within its window %v and 2 s", time.Since(start), window)
	}
	done := make(chan struct{})
	go func() { trig.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	if err := trig.Err(); err != nil {
		t.Errorf("Err after Close = %v, want nil", err)
	}
}

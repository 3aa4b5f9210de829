package pagesample

import (
	"bufio"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// childEnv makes the test binary the sampled process: it maps region MiB
// of pages, every other one random and the rest zero-filled, and as much
// again that it never touches, then waits on stdin.
const childEnv = "PAGESAMPLE_CHILD"

const region = 128 << 20

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		child()
		return
	}
	os.Exit(m.Run())
}

func child() {
	mem, err := unix.Mmap(-1, 0, region, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		panic(err)
	}
	untouched, err := unix.Mmap(-1, 0, region, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		panic(err)
	}
	_ = untouched
	rng := rand.NewPCG(1, 2)
	for off := 0; off < region; off += 2 * pageSize {
		for i := off; i < off+pageSize; i += 8 {
			v := rng.Uint64()
			for b := range 8 {
				mem[i+b] = byte(v >> (8 * b))
			}
		}
		mem[off+pageSize] = 0 // the zero page after it, touched so that it is present
	}
	os.Stdout.WriteString("ready\n")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

// startChild starts the sampled process and waits until its pages are
// written.
func startChild(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the sampled process did not start: %q, %v", line, err)
	}
	return cmd.Process.Pid
}

// rss is a process's resident anonymous memory, from smaps_rollup.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(l, "Anonymous:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no Anonymous: in smaps_rollup")
	return 0
}

// Half the pages random (stored whole), half zero-filled (stored as a
// word): the sample reads about 2:1, and faults in none of the pages the
// process never touched.
func TestSampleOfHalfRandomHalfZero(t *testing.T) {
	pid := startChild(t)
	before := rss(t, pid)
	res, err := Sample("/proc", []int{pid}, 1024, rand.New(rand.NewPCG(3, 4)))
	if err != nil {
		t.Fatal(err)
	}
	after := rss(t, pid)
	t.Logf("%d pages read, %d same-filled, %d bytes stored: %.2f:1; anonymous resident %d KiB before, %d after",
		res.Pages, res.Same, res.Stored, res.Ratio(), before>>10, after>>10)
	if res.Pages < 900 {
		t.Errorf("%d pages read of 1,024 asked, with half the anonymous memory present: want 900 or more", res.Pages)
	}
	// 1,024 pages, half of them zero: the share of zero pages is 0.5 ±
	// 0.016 (one standard deviation), the Go runtime's own pages aside.
	if r := res.Ratio(); r < 1.8 || r > 2.25 {
		t.Errorf("ratio %.2f:1, want 1.8 to 2.25 (half the pages random, half zero)", r)
	}
	if after > before+1<<20 {
		t.Errorf("the sample faulted in %d KiB of the process's memory: only present pages are read", (after-before)>>10)
	}
}

// A process that is gone gives nothing, and no error.
func TestSampleOfAProcessGone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	res, err := Sample("/proc", []int{cmd.Process.Pid}, 64, rand.New(rand.NewPCG(1, 1)))
	if err != nil || res.Pages != 0 {
		t.Errorf("a process gone: %+v, %v; want nothing and no error", res, err)
	}
}

func TestSameFilled(t *testing.T) {
	page := make([]byte, pageSize)
	if !sameFilled(page) {
		t.Error("a zero page is same-filled")
	}
	for i := 0; i < pageSize; i += 8 {
		copy(page[i:], "abcdefgh")
	}
	if !sameFilled(page) {
		t.Error("a page of one repeated word is same-filled")
	}
	page[pageSize-1] = 'x'
	if sameFilled(page) {
		t.Error("a page with one byte off is not same-filled")
	}
}

package main

import (
	"bufio"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/bench/internal/zram"
	"github.com/thrashscope/thrashscope/internal/pagesample"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// pagesChild makes the test binary a process holding mixedBytes of pages
// of four kinds in turn (random, zero-filled, and two of words drawn from
// a small vocabulary, as text and many data structures are), which it
// pages out with MADV_PAGEOUT when told to.
const pagesChild = "THRASHSCOPE_PAGES_CHILD"

const mixedBytes = 256 << 20

func TestMain(m *testing.M) {
	if os.Getenv(pagesChild) == "1" {
		mixedPages()
		return
	}
	os.Exit(m.Run())
}

func mixedPages() {
	mem, err := unix.Mmap(-1, 0, mixedBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		panic(err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	words := strings.Fields("the page cache holds a file's pages while the swap holds a process's own memory that it wrote and may read again")
	const page = 4096
	for off, i := 0, 0; off < mixedBytes; off, i = off+page, i+1 {
		p := mem[off : off+page]
		switch i % 4 {
		case 0:
			for j := 0; j < page; j += 8 {
				v := rng.Uint64()
				for b := range 8 {
					p[j+b] = byte(v >> (8 * b))
				}
			}
		case 1:
			p[0] = 0 // touched, so that it is present: a zero page all the same
		default:
			for j := 0; j < page; {
				j += copy(p[j:], words[rng.IntN(len(words))]+" ")
			}
		}
	}
	in := bufio.NewReader(os.Stdin)
	os.Stdout.WriteString("ready\n")
	if _, err := in.ReadString('\n'); err != nil {
		return
	}
	if err := unix.Madvise(mem, unix.MADV_PAGEOUT); err != nil {
		panic(err)
	}
	os.Stdout.WriteString("out\n")
	_, _ = in.ReadString('\n')
}

// mmStat reads a zram device's orig_data_size, compr_data_size and
// same_pages.
func mmStat(t *testing.T, dev string) (orig, compr, same uint64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/block", dev, "mm_stat"))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	n := func(i int) uint64 {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return n(0), n(1), n(5)
}

// TestCompressionSampleAgreesWithZram: the compression ratio a diagnosis
// takes from a sample of a process's resident pages is the one zram gets
// when those pages are swapped to it (its own mm_stat), within 10 %.
func TestCompressionSampleAgreesWithZram(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireFreeZram(t)
	undo, err := zram.Swap()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := undo(); err != nil {
			t.Error(err)
		}
	})
	b, _ := os.ReadFile("/proc/swaps")
	dev := ""
	for l := range strings.Lines(string(b)) {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "/dev/zram") {
			dev = strings.TrimPrefix(f[0], "/dev/")
		}
	}
	if dev == "" {
		t.Fatalf("no zram swap area after making one:\n%s", b)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), pagesChild+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	out := bufio.NewReader(stdout)
	if l, err := out.ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("the process did not write its pages: %q, %v", l, err)
	}
	res, err := pagesample.Sample("/proc", []int{cmd.Process.Pid}, 2048, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	orig0, compr0, same0 := mmStat(t, dev)
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if l, err := out.ReadString('\n'); err != nil || l != "out\n" {
		t.Fatalf("the process did not page out: %q, %v", l, err)
	}
	orig1, compr1, same1 := mmStat(t, dev)
	orig, compr, same := orig1-orig0, compr1-compr0, same1-same0
	// Zero pages are a quarter of those written: from Linux 6.12 they never
	// reach the pool (the swap's zeromap), before it zram keeps them as
	// same-filled. Either way they cost nothing, and the pool's own ratio
	// is of the rest.
	stored := orig - same*4096
	if stored < mixedBytes/2 {
		t.Fatalf("zram took %d KiB (%d same-filled pages) of the %d KiB paged out: the pages did not go to it", orig>>10, same, mixedBytes>>10)
	}
	want := float64(stored) / float64(compr)
	t.Logf("sample: %d pages, %d same-filled, %d bytes stored: %.2f:1 in all, %.2f:1 of the pages stored; zram: %d KiB in, %d same-filled pages, %d KiB stored: %.2f:1",
		res.Pages, res.Same, res.Stored, res.Ratio(), res.StoredRatio(), orig>>10, same, compr>>10, want)
	if res.Pages < 1024 {
		t.Errorf("%d pages read of 2,048 asked: the sample found too few present", res.Pages)
	}
	// A quarter of the region's pages are zero; the Go runtime's own
	// pages are the rest of the process.
	if share := float64(res.Same) / float64(res.Pages); share < 0.18 || share > 0.32 {
		t.Errorf("%.0f %% of the sample same-filled, want about 25 %% (a quarter of the pages written are zero)", share*100)
	}
	if got := res.StoredRatio(); got < want*0.9 || got > want*1.1 {
		t.Errorf("the sample reads %.2f:1 of the pages stored, zram stored them at %.2f:1: want within 10 %%", got, want)
	}
}

package indicators

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/testenv"
)

// BenchmarkWorkingSetScan is the estimator's cost: one round over this test
// process while it holds 1 GiB in 4 KiB pages. "hot" has every page's
// accessed bit set before each round (a process touching all it has),
// "cold" none; "read" and "clear" split a hot round into its two walks;
// "swapped" is the same gibibyte paged out to swap, as a thrashing process's
// would be. ns/page and pages/s are over the Rss+Swap pages the budget
// counts, so DefaultPageBudget follows from them.
func BenchmarkWorkingSetScan(b *testing.B) {
	const size = 1 << 30
	page := os.Getpagesize()
	region, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unix.Munmap(region) })
	// 4 KiB pages, one PTE each: the walk's worst case per byte.
	if err := unix.Madvise(region, unix.MADV_NOHUGEPAGE); err != nil {
		b.Fatal(err)
	}
	touch := func() {
		for off := 0; off < size; off += page {
			region[off]++
		}
	}
	touch()

	pid := os.Getpid()
	w := NewWorkingSet(WorkingSetConfig{Interval: time.Second, PageBudget: 1 << 40})
	if err := w.ScanOnce([]int{pid}); err != nil { // first sight: clear only
		b.Fatal(err)
	}
	perPage := func(b *testing.B, before WorkingSetStats) {
		after := w.Stats()
		pages := float64(after.PagesScanned - before.PagesScanned)
		secs := after.ScanSeconds - before.ScanSeconds
		b.ReportMetric(secs*1e9/pages, "ns/page")
		b.ReportMetric(pages/secs, "pages/s")
	}
	scan := func(hot bool) func(b *testing.B) {
		return func(b *testing.B) {
			before := w.Stats()
			for b.Loop() {
				if hot {
					b.StopTimer()
					touch()
					b.StartTimer()
				}
				if err := w.ScanOnce([]int{pid}); err != nil {
					b.Fatal(err)
				}
			}
			perPage(b, before)
		}
	}
	b.Run("hot", scan(true))
	b.Run("cold", scan(false))

	r, _, err := w.fs.Smaps(pid, nil)
	if err != nil {
		b.Fatal(err)
	}
	pages := float64((r.RSS + r.Swap) / uint64(page))
	b.Run("read", func(b *testing.B) {
		touch() // reading leaves the bits set
		for b.Loop() {
			if _, _, err := w.fs.Smaps(pid, nil); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/pages, "ns/page")
	})
	b.Run("clear", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			touch()
			b.StartTimer()
			if err := w.fs.ClearRefs(pid); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/pages, "ns/page")
	})

	b.Run("swapped", func(b *testing.B) {
		if swaps, err := os.ReadFile("/proc/swaps"); err != nil || bytes.Count(swaps, []byte("\n")) < 2 {
			testenv.Unavailable(b, "no swap to page the region out to: enable a swap file (fallocate, mkswap, swapon)")
		}
		if err := unix.Madvise(region, unix.MADV_PAGEOUT); err != nil {
			testenv.Unavailable(b, fmt.Sprintf("madvise(MADV_PAGEOUT): %v (Linux 5.4 and later)", err))
		}
		r, _, err := w.fs.Smaps(pid, nil)
		if err != nil {
			b.Fatal(err)
		}
		if r.Swap < size/2 {
			testenv.Unavailable(b, fmt.Sprintf("MADV_PAGEOUT left %d MiB in swap, want most of the %d MiB: is swap full?", r.Swap>>20, size>>20))
		}
		scan(false)(b)
	})
}

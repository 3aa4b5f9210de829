// Package pagesample measures how a group's memory would compress in a
// compressed swap pool (zram, zswap), from a sample of its processes'
// resident anonymous pages: each page compressed on its own with LZ4, as
// the pools store them, a page of one repeated word counted as free (the
// pools keep only the word), a page that does not shrink below zram's huge
// class as whole.
//
// Only pages present in memory are read (their pagemap entry says so), so
// that the sample swaps nothing back in; the contents are compressed and
// dropped, never kept. Reading another process's memory takes
// CAP_SYS_PTRACE (process_vm_readv); without it the sample says so.
package pagesample

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pierrec/lz4/v4"
	"golang.org/x/sys/unix"
)

const pageSize = 4096

// maxIovecs is IOV_MAX, the most pages one process_vm_readv reads.
const maxIovecs = 1024

// hugeClass is the compressed size from which zram stores a page whole:
// zsmalloc's huge class for 4 KiB pages (zs_huge_class_size).
const hugeClass = 3264

// Result is a sample's figures.
type Result struct {
	// Pages were read; Same of them were one repeated word.
	Pages, Same int
	// Bytes is what they hold, Stored what a pool would store for them.
	Bytes, Stored int64
}

// Ratio is Bytes over Stored, 0 with no page read: what a pool would save.
// A sample of only same-filled pages is held at the ratio of one stored
// word per page.
func (r Result) Ratio() float64 {
	if r.Pages == 0 {
		return 0
	}
	return float64(r.Bytes) / float64(max(r.Stored, int64(r.Pages)*8))
}

// StoredRatio is the ratio of the pages a pool stores compressed, the
// same-filled ones left out: a pool's own figure (zram's orig_data_size
// over compr_data_size, less its same_pages; from Linux 6.12 a zero page
// never reaches the pool at all). 0 with none.
func (r Result) StoredRatio() float64 {
	if r.Stored == 0 {
		return 0
	}
	return float64(r.Bytes-int64(r.Same)*pageSize) / float64(r.Stored)
}

// ErrNotPermitted is a sample the kernel refused: reading another
// process's memory takes CAP_SYS_PTRACE.
var ErrNotPermitted = errors.New("reading the processes' pages was refused: the compression sample needs CAP_SYS_PTRACE")

// Sample reads up to perProcess resident anonymous pages of each pid,
// chosen at random over its anonymous mappings, and compresses each. A
// process that exits meanwhile is skipped.
func Sample(procRoot string, pids []int, perProcess int, rng *rand.Rand) (Result, error) {
	var res Result
	var refused error
	for _, pid := range pids {
		r, err := sampleOne(procRoot, pid, perProcess, rng)
		res.Pages, res.Same, res.Bytes, res.Stored = res.Pages+r.Pages, res.Same+r.Same, res.Bytes+r.Bytes, res.Stored+r.Stored
		switch {
		case err == nil, errors.Is(err, os.ErrNotExist), errors.Is(err, unix.ESRCH), errors.Is(err, unix.EFAULT):
			// Gone meanwhile, or its mapping was.
		case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
			refused = ErrNotPermitted
		default:
			return res, fmt.Errorf("sampling the pages of process %d: %w", pid, err)
		}
	}
	if res.Pages == 0 && refused != nil {
		return res, refused
	}
	return res, nil
}

// span is one anonymous mapping.
type span struct{ start, end uint64 }

func sampleOne(procRoot string, pid, n int, rng *rand.Rand) (Result, error) {
	addrs, err := presentPages(filepath.Join(procRoot, strconv.Itoa(pid)), n, rng)
	if err != nil || len(addrs) == 0 {
		return Result{}, err
	}
	buf, err := readPages(pid, addrs)
	if err != nil {
		return Result{}, err
	}
	return compress(buf), nil
}

// pagemapRun is how many neighbouring pages' pagemap entries one read
// takes, and perRun how many present pages a run gives the sample at
// most: a read of one entry took the mmap lock of a thrashing process, and
// a system call, for each of up to four candidates a page.
const (
	pagemapRun = 8
	perRun     = 2
)

// presentPages picks up to n present anonymous pages of the process whose
// /proc directory is dir: from runs of pagemapRun pages starting at random
// over its anonymous pages, perRun at most from each, chosen at random
// among its present ones. It reads at most 4n/perRun runs (two pages'
// candidates for each of the four reads a page took one at a time), so that
// a mostly swapped-out process still gives a few.
func presentPages(dir string, n int, rng *rand.Rand) ([]uint64, error) {
	spans, total, err := anonSpans(filepath.Join(dir, "maps"))
	if err != nil || total == 0 {
		return nil, err
	}
	pm, err := os.Open(filepath.Join(dir, "pagemap"))
	if err != nil {
		return nil, err
	}
	defer pm.Close()
	var addrs []uint64
	var entries [pagemapRun * 8]byte
	for try := 0; try < 4*n/perRun+1 && len(addrs) < n; try++ {
		addr, end := pageAt(spans, rng.Uint64N(total))
		run := int(min(pagemapRun, (end-addr)/pageSize))
		k, err := pm.ReadAt(entries[:run*8], int64(addr/pageSize*8))
		if err != nil && k < 8 {
			return nil, err
		}
		var present []uint64
		for i := range k / 8 {
			if binary.LittleEndian.Uint64(entries[i*8:])&(1<<63) != 0 {
				present = append(present, addr+uint64(i)*pageSize)
			}
		}
		rng.Shuffle(len(present), func(i, j int) { present[i], present[j] = present[j], present[i] })
		addrs = append(addrs, present[:min(len(present), perRun, n-len(addrs))]...)
	}
	return addrs, nil
}

// readPages copies the pages at addrs out of the process. It returns
// fewer when one is unmapped meanwhile: the read stops there.
func readPages(pid int, addrs []uint64) ([]byte, error) {
	buf := make([]byte, len(addrs)*pageSize)
	got := 0
	for len(addrs) > 0 {
		// A call takes at most IOV_MAX (1,024) remote pages.
		batch := addrs[:min(len(addrs), maxIovecs)]
		addrs = addrs[len(batch):]
		local := []unix.Iovec{{Base: &buf[got]}}
		local[0].SetLen(len(batch) * pageSize)
		remote := make([]unix.RemoteIovec, len(batch))
		for i, a := range batch {
			remote[i] = unix.RemoteIovec{Base: uintptr(a), Len: pageSize}
		}
		n, err := unix.ProcessVMReadv(pid, local, remote, 0)
		if err != nil {
			return nil, err
		}
		got += n
		if n < len(batch)*pageSize {
			break
		}
	}
	return buf[:got-got%pageSize], nil
}

// compress sizes each page as the pool would store it.
func compress(buf []byte) Result {
	var res Result
	var c lz4.Compressor
	out := make([]byte, lz4.CompressBlockBound(pageSize))
	for off := 0; off+pageSize <= len(buf); off += pageSize {
		page := buf[off : off+pageSize]
		res.Pages++
		res.Bytes += pageSize
		if sameFilled(page) {
			res.Same++
			continue
		}
		k, err := c.CompressBlock(page, out)
		if err != nil || k == 0 || k >= hugeClass {
			k = pageSize // does not shrink enough: stored whole
		}
		res.Stored += int64(k)
	}
	return res
}

// sameFilled says whether a page is one 8-byte word repeated, which zram
// and zswap keep as that word alone.
func sameFilled(page []byte) bool {
	w := binary.LittleEndian.Uint64(page)
	for i := 8; i < len(page); i += 8 {
		if binary.LittleEndian.Uint64(page[i:]) != w {
			return false
		}
	}
	return true
}

// pageAt is the address of the i-th page over the spans, and the end of
// its span.
func pageAt(spans []span, i uint64) (addr, end uint64) {
	for _, s := range spans {
		n := (s.end - s.start) / pageSize
		if i < n {
			return s.start + i*pageSize, s.end
		}
		i -= n
	}
	last := spans[len(spans)-1]
	return last.start, last.end
}

// anonSpans are a process's private writable anonymous mappings (the heap,
// anonymous mmaps; not its stack's guard or files), and their pages in
// all.
func anonSpans(path string) ([]span, uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	var spans []span
	var total uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode [path]
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || !strings.HasPrefix(fields[1], "rw") || fields[1][3] != 'p' {
			continue
		}
		if len(fields) > 5 && fields[5] != "[heap]" {
			continue // a file's pages, the stack, vdso and the like
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			return nil, 0, fmt.Errorf("%s: a mapping's range %q", path, fields[0])
		}
		spans = append(spans, span{start, end})
		total += (end - start) / pageSize
	}
	return spans, total, sc.Err()
}

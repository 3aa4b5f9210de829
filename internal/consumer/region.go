// The consumer's region: mapped anonymous, shared or over an unlinked file
// (--backing), filled, and written a cycle at a time.

package consumer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/run"
)

// mapRegion maps size bytes outside the Go heap: private anonymous memory,
// or a shared mapping of an unlinked file in dir, so that nothing is left on
// disk even after kill -9. Transparent huge pages are off so that faults and
// accessed bits are per 4 KiB page.
func mapRegion(size int64, backing, dir string) ([]byte, error) {
	var b []byte
	var err error
	if backing == run.BackingFile {
		b, err = mapUnlinkedFile(size, dir)
	} else {
		b, err = unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			err = fmt.Errorf("mmap of %d anonymous bytes: %w", size, err)
		}
	}
	if err != nil {
		return nil, err
	}
	// EINVAL: a kernel without THP, where there is nothing to turn off.
	err = retryAgain(againFor, againEvery, func() error { return unix.Madvise(b, unix.MADV_NOHUGEPAGE) })
	if err != nil && !errors.Is(err, unix.EINVAL) {
		unix.Munmap(b)
		return nil, fmt.Errorf("madvise(MADV_NOHUGEPAGE): %w", err)
	}
	// The consumer process locks its runtime's pages (mlockall with
	// MCL_FUTURE); the region must stay free to be swapped: it is the
	// thrash. Without an mlockall this does nothing.
	if err := retryAgain(againFor, againEvery, func() error { return unix.Munlock(b) }); err != nil {
		unix.Munmap(b)
		return nil, fmt.Errorf("munlock of the region: %w", err)
	}
	return b, nil
}

// A consumer maps its region as it starts, often into a run cgroup at its
// limit: the kernel memory a mapping's change needs (a split of its
// vm_area_struct, charged to the cgroup) can then fail for a moment, and
// madvise and munlock say EAGAIN until reclaim (the tasks' own, or the OOM
// guard's rescue) makes room. A consumer that gave up at
// once failed its run: e4 at scale 0.1 ended 30 s in with "madvise
// (MADV_NOHUGEPAGE): resource temporarily unavailable".
const (
	againFor   = 10 * time.Second
	againEvery = 10 * time.Millisecond
)

// retryAgain calls op until it does not fail with EAGAIN, every wait, for
// at most limit; then it says how long it tried.
func retryAgain(limit, wait time.Duration, op func() error) error {
	deadline := time.Now().Add(limit)
	for tries := 1; ; tries++ {
		err := op()
		if !errors.Is(err, unix.EAGAIN) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w, %d times over %s", err, tries, limit)
		}
		time.Sleep(wait)
	}
}

func mapUnlinkedFile(size int64, dir string) ([]byte, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	f, err := openUnlinked(dir)
	if err != nil {
		return nil, fmt.Errorf("backing file in %s: %w", dir, err)
	}
	defer f.Close() // the mapping keeps the file
	if err := f.Truncate(size); err != nil {
		return nil, fmt.Errorf("backing file in %s: %w", dir, err)
	}
	// Reserve the blocks now: a full disk is an error here rather than a
	// SIGBUS in the middle of the fill.
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
		return nil, fmt.Errorf("backing file in %s: reserving %d bytes: %w", dir, size, err)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap of a %d-byte backing file in %s: %w", size, dir, err)
	}
	return b, nil
}

// openUnlinked opens a file in dir that has no name: O_TMPFILE, or where
// the file system lacks it a named file removed at once.
func openUnlinked(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), dir+"/(unlinked)"), nil
	}
	return createUnlinked(dir)
}

func createUnlinked(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, "thrashscope-consumer-*")
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// fillRandom writes incompressible bytes, 8 at a time; false when stop
// abandoned it.
func fillRandom(b []byte, seed uint64, stop *atomic.Bool) bool {
	x := seed
	for off := 0; off < len(b); off += stopCheckFill {
		if stop != nil && stop.Load() {
			return false
		}
		p := b[off:min(off+stopCheckFill, len(b))]
		for len(p) >= 8 {
			x += wyAdd
			hi, lo := bits.Mul64(x, x^wyXor)
			binary.LittleEndian.PutUint64(p, hi^lo)
			p = p[8:]
		}
		for i := range p {
			x += wyAdd
			hi, lo := bits.Mul64(x, x^wyXor)
			p[i] = byte(hi ^ lo)
		}
	}
	return true
}

// fillZero writes a zero into each page, so each is faulted in and dirty.
func fillZero(b []byte, stop *atomic.Bool) bool {
	for off := 0; off < len(b); off += pageSize {
		if off%stopCheckFill == 0 && stop != nil && stop.Load() {
			return false
		}
		b[off] = 0
	}
	return true
}

// writeCycle does writes one-byte writes at random offsets in b and returns
// how many it did: fewer only when stop was set.
func writeCycle(b []byte, writes int, state *uint64, stop *atomic.Bool) int {
	n := uint64(len(b))
	x := *state
	done := 0
	for done < writes {
		batch := min(writes-done, stopCheckWrites)
		for range batch {
			x += wyAdd
			hi, lo := bits.Mul64(x, x^wyXor)
			r := hi ^ lo
			off, _ := bits.Mul64(r, n) // Lemire: r·n/2⁶⁴ is uniform in [0, n)
			b[off] = byte(r)
		}
		done += batch
		if stop.Load() {
			break
		}
	}
	*state = x
	return done
}

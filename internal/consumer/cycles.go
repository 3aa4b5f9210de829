package consumer

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The cycle board is shared memory where consumers log their write cycles
// and the master takes them when it looks (each second, at each sample and
// when a consumer ends). A message on the pipe wakes the master; a cycle
// logged here does not: 25 consumers cycling ten times a second would wake
// it 250 times a second, on the host it is there to observe. Nothing is
// lost when a consumer is killed: the memory is the master's.
//
// Each consumer has a slot of cycleSlotBytes at index × cycleSlotBytes: a
// count of cycles logged, then a ring of the last cycleRingLen cycles
// (writes done, duration in ns). The consumer fills an entry and then
// publishes it by incrementing the count.
const (
	cycleSlotBytes  = 8 << 10 // two pages: a slot maps on its own
	cycleHeader     = 64      // the count, on a cache line of its own
	cycleEntryBytes = 16
	cycleRingLen    = (cycleSlotBytes - cycleHeader) / cycleEntryBytes
)

// CycleBoard is the master's side: one memfd for the whole run.
type CycleBoard struct {
	File  *os.File // fd 5 of each consumer
	mem   []byte
	taken []uint64 // per slot, the cycles already taken
}

// NewCycleBoard makes a board for n consumers. Its pages are touched
// here, so they are charged to the master's cgroup, not the run's limit.
func NewCycleBoard(n int) (*CycleBoard, error) {
	fd, err := unix.MemfdCreate("thrashscope-cycles", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create for the cycle board: %w", err)
	}
	f := os.NewFile(uintptr(fd), "cycle board")
	size := n * cycleSlotBytes
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return nil, fmt.Errorf("sizing the cycle board: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("mapping the cycle board: %w", err)
	}
	for off := 0; off < len(mem); off += os.Getpagesize() {
		mem[off] = 0
	}
	return &CycleBoard{File: f, mem: mem, taken: make([]uint64, n)}, nil
}

// take passes each cycle consumer i logged since the last take to f, oldest
// first, and returns how many there were. When more than the ring holds
// came in between, the oldest are counted but not passed.
func (b *CycleBoard) Take(i int, f func(writes int64, d time.Duration)) uint64 {
	slot := b.mem[i*cycleSlotBytes : (i+1)*cycleSlotBytes]
	count := slotCount(slot).Load()
	prev := b.taken[i]
	if count <= prev {
		return 0
	}
	from := prev
	// The entry after the newest may be being written: keep off it.
	if count-from > cycleRingLen-1 {
		from = count - (cycleRingLen - 1)
	}
	for k := from; k < count; k++ {
		w, d := slotEntry(slot, k)
		f(w.Load(), time.Duration(d.Load()))
	}
	b.taken[i] = count
	return count - prev
}

func (b *CycleBoard) Close() {
	if b == nil {
		return
	}
	_ = unix.Munmap(b.mem)
	b.File.Close()
}

func slotCount(slot []byte) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&slot[0]))
}

func slotEntry(slot []byte, k uint64) (writes, ns *atomic.Int64) {
	off := cycleHeader + int(k%cycleRingLen)*cycleEntryBytes
	return (*atomic.Int64)(unsafe.Pointer(&slot[off])), (*atomic.Int64)(unsafe.Pointer(&slot[off+8]))
}

// CycleLog is a consumer's slot on the cycle board.
type CycleLog struct {
	slot  []byte
	count uint64
}

// OpenCycleLog maps consumer index's slot of the board open on fd.
func OpenCycleLog(fd, index int) (*CycleLog, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("the cycle board (fd %d): %w", fd, err)
	}
	off := int64(index) * cycleSlotBytes
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size < off+cycleSlotBytes {
		return nil, fmt.Errorf("fd %d is not a cycle board with a slot for consumer %d (size %d)", fd, index, st.Size)
	}
	slot, err := unix.Mmap(fd, off, cycleSlotBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the cycle board slot of consumer %d: %w", index, err)
	}
	l := &CycleLog{slot: slot, count: slotCount(slot).Load()}
	if l.count != 0 {
		_ = unix.Munmap(slot)
		return nil, errors.New("the cycle board slot is already in use")
	}
	return l, nil
}

// Add logs one cycle: its entry first, then the count that publishes it.
func (l *CycleLog) Add(writes int64, d time.Duration) {
	w, ns := slotEntry(l.slot, l.count)
	w.Store(writes)
	ns.Store(int64(d))
	l.count++
	slotCount(l.slot).Store(l.count)
}

// Close unmaps the slot.
func (l *CycleLog) Close() error { return unix.Munmap(l.slot) }

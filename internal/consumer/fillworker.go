package consumer

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// hotPagesPerCheck is how many pages the hot helper touches between looks
// at its channels.
const hotPagesPerCheck = 64

// fillChunks is seed 002's progressive fill: per repeat, map and fill
// Chunks chunks one after another, timing each fill, while a helper thread
// keeps the chunks filled before it hot.
func (c *consumer) fillChunks(began time.Time) error {
	if err := c.send(StartedMessage(began, time.Time{})); err != nil {
		return err
	}
	hot := startHotKeeper(c.cfg.HotInterval)
	var chunks [][]byte
	release := func() {
		hot.set(nil) // the helper lets go of them before they are unmapped
		for _, b := range chunks {
			unix.Munmap(b)
		}
		chunks = nil
	}
	defer func() {
		release()
		hot.stop()
	}()
	var n int64
	for r := range c.cfg.Repeats {
		for k := range c.cfg.Chunks {
			if c.stop.Load() {
				return c.done(n)
			}
			b, err := mapRegion(c.cfg.Size, c.cfg.Backing, c.cfg.FileDir)
			if err != nil {
				return c.fail(fmt.Errorf("repeat %d, chunk %d: %w", r, k, err))
			}
			t0 := time.Now()
			ok := c.fill(b, rand.Uint64())
			d := time.Since(t0)
			chunks = append(chunks, b)
			if !ok {
				return c.done(n)
			}
			n++
			if err := c.send(ChunkMessage(r, k, d)); err != nil {
				return err
			}
			hot.set(slices.Clone(chunks))
		}
		release()
	}
	return c.done(n)
}

// hotKeeper is the helper that keeps earlier chunks hot by writing one byte
// per page over them, round and round, on its own OS thread.
type hotKeeper struct {
	interval time.Duration
	update   chan [][]byte // unbuffered: a send returns once the helper holds the new list
	quit     chan struct{}
	done     chan struct{}
	passes   atomic.Uint64 // completed passes, for tests
}

func startHotKeeper(interval time.Duration) *hotKeeper {
	h := &hotKeeper{
		interval: interval,
		update:   make(chan [][]byte),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go h.run()
	return h
}

// set hands the helper a new list. When it returns the helper touches
// only the new list, so chunks left out of it may be unmapped.
func (h *hotKeeper) set(chunks [][]byte) {
	select {
	case h.update <- chunks:
	case <-h.done:
	}
}

// stop ends the helper and waits for it.
func (h *hotKeeper) stop() {
	close(h.quit)
	<-h.done
}

func (h *hotKeeper) run() {
	defer close(h.done)
	// Its own thread, as seed 002's helper: the kernel sees two tasks,
	// one filling and one rewriting.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var chunks [][]byte
	ci, off := 0, 0 // where the pass is; kept when the list grows
	adopt := func(l [][]byte) {
		chunks = l
		if ci >= len(l) {
			ci, off = 0, 0
		}
	}
	for {
		if len(chunks) == 0 {
			select {
			case l := <-h.update:
				adopt(l)
			case <-h.quit:
				return
			}
			continue
		}
		b := chunks[ci]
		off = touch(b, off)
		if off >= len(b) {
			ci, off = ci+1, 0
		}
		var pause <-chan time.Time
		if ci >= len(chunks) {
			ci = 0
			h.passes.Add(1)
			if h.interval > 0 {
				pause = time.After(h.interval)
			}
		}
		if pause == nil {
			select {
			case l := <-h.update:
				adopt(l)
			case <-h.quit:
				return
			default:
			}
			continue
		}
		select {
		case l := <-h.update:
			adopt(l)
		case <-pause:
		case <-h.quit:
			return
		}
	}
}

// touch writes up to hotPagesPerCheck pages of b from off, one store a
// page, and returns where it stopped. Any store dirties the page; skipping
// 0 on the wrap lets a test tell a written page from a fresh one after any
// number of passes.
func touch(b []byte, off int) int {
	for range hotPagesPerCheck {
		if off >= len(b) {
			break
		}
		if b[off]++; b[off] == 0 {
			b[off] = 1
		}
		off += pageSize
	}
	return off
}

package consumer

import (
	"bytes"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/run"
)

func fillConfig(chunk int64, chunks, repeats int) Config {
	return Config{Mode: ModeFill, Size: chunk, Chunks: chunks, Repeats: repeats, Backing: run.BackingAnon, Fill: run.FillRandom}
}

func TestConsumeFillMode(t *testing.T) {
	for _, fill := range []string{run.FillRandom, run.FillZero} {
		t.Run(fill, func(t *testing.T) {
			cfg := fillConfig(4*testMiB, 2, 2)
			cfg.Fill = fill
			began := time.Now()
			r := startConsume(t, cfg, true)
			reps, err := r.wait(t, 10*time.Second)
			if err != nil {
				t.Fatalf("Consume: %v", err)
			}
			if len(reps) != 6 || reps[0].Kind != KindStarted || reps[5].Kind != KindDone {
				t.Fatalf("reports %s, want started, 4 chunks, done", kinds(reps))
			}
			if reps[0].TimeA().Before(began) {
				t.Errorf("started at %v, before Consume was called", reps[0].TimeA())
			}
			want := [][2]int{{0, 0}, {0, 1}, {1, 0}, {1, 1}}
			for i, c := range reps[1:5] {
				rep, chunk := c.Chunk()
				if c.Kind != KindChunk || rep != want[i][0] || chunk != want[i][1] || c.Duration() <= 0 {
					t.Errorf("report %d: %v (repeat %d, chunk %d), want a timed chunk %v", i+1, c, rep, chunk, want[i])
				}
			}
			if d := reps[5]; d.B != 4 || d.Terminated() {
				t.Errorf("done %v: want 4 chunks, not terminated", d)
			}
		})
	}
}

func TestConsumeFillCancel(t *testing.T) {
	cfg := fillConfig(16*testMiB, 1000, 1) // 16 GB in all: it must be stopped
	r := startConsume(t, cfg, true)
	r.next(t, KindChunk, 5*time.Second)
	t0 := time.Now()
	r.cancel()
	reps, err := r.wait(t, 5*time.Second)
	if d := time.Since(t0); d > 200*time.Millisecond {
		t.Errorf("stopped %s after the cancel, want within 200ms", d)
	}
	if err != nil || len(reps) == 0 || reps[len(reps)-1].Kind != KindDone || !reps[len(reps)-1].Terminated() {
		t.Fatalf("got %v, %s; want nil and a terminated done", err, kinds(reps))
	}
}

func TestHotKeeper(t *testing.T) {
	h := startHotKeeper(0)
	defer h.stop()
	a, b := make([]byte, 8*pageSize), make([]byte, 3*pageSize+100)
	h.set([][]byte{a})
	h.set([][]byte{a, b}) // the list grows as chunks fill
	// Passes over a alone may already have been counted: wait for two
	// more wraps, so one whole pass ran over the grown list.
	waitPasses(t, h, h.passes.Load()+2)
	// Once set returns, the old chunks are left alone: they may be unmapped.
	h.set(nil)
	for _, c := range [][]byte{a, b} {
		for off := 0; off < len(c); off += pageSize {
			if c[off] == 0 {
				t.Fatalf("page at %d of a %d-byte chunk never written", off, len(c))
			}
		}
	}
	snapA, snapB := bytes.Clone(a), bytes.Clone(b)
	time.Sleep(20 * time.Millisecond)
	if !bytes.Equal(a, snapA) || !bytes.Equal(b, snapB) {
		t.Fatal("the helper wrote to chunks after they were taken from it")
	}
}

func TestHotKeeperInterval(t *testing.T) {
	h := startHotKeeper(50 * time.Millisecond)
	defer h.stop()
	h.set([][]byte{make([]byte, 4*pageSize)})
	time.Sleep(220 * time.Millisecond)
	if n := h.passes.Load(); n < 2 || n > 6 {
		t.Fatalf("%d passes in 220ms with a 50ms pause, want about 4", n)
	}
}

func waitPasses(t *testing.T, h *hotKeeper, n uint64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); h.passes.Load() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the helper made %d passes in 5s, want %d", h.passes.Load(), n)
		}
	}
}

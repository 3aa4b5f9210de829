package consumer

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestCycleBoard: a consumer's logged cycles reach the master in order,
// each once, from its own slot only; a consumer that outran the ring has
// every cycle counted and the newest passed on.
func TestCycleBoard(t *testing.T) {
	b, err := NewCycleBoard(3)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fd := int(b.File.Fd())
	l, err := OpenCycleLog(fd, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var got []time.Duration
	collect := func(w int64, d time.Duration) {
		if w != 1000 {
			t.Errorf("writes %d, want 1000", w)
		}
		got = append(got, d)
	}
	if n := b.Take(1, collect); n != 0 {
		t.Fatalf("an empty slot gave %d cycles", n)
	}
	for k := 1; k <= 3; k++ {
		l.Add(1000, time.Duration(k)*time.Millisecond)
	}
	if n := b.Take(1, collect); n != 3 || len(got) != 3 || got[0] != time.Millisecond || got[2] != 3*time.Millisecond {
		t.Fatalf("took %d: %v; want 1, 2, 3 ms", n, got)
	}
	if n := b.Take(0, collect) + b.Take(2, collect) + b.Take(1, collect); n != 0 {
		t.Errorf("%d cycles taken twice or from the wrong slot", n)
	}

	got = nil
	const many = cycleRingLen + 100
	for k := range many {
		l.Add(1000, time.Duration(k))
	}
	if n := b.Take(1, collect); n != many {
		t.Errorf("counted %d of %d cycles", n, many)
	}
	if len(got) != cycleRingLen-1 || got[len(got)-1] != many-1 || got[0] != many-(cycleRingLen-1) {
		t.Errorf("passed %d durations, %v to %v; want the newest %d", len(got), got[0], got[len(got)-1], cycleRingLen-1)
	}

	if _, err := OpenCycleLog(fd, 1); err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Errorf("a second log on a used slot: %v", err)
	}
	if _, err := OpenCycleLog(fd, 3); err == nil || !strings.Contains(err.Error(), "not a cycle board") {
		t.Errorf("a slot past the board: %v", err)
	}
	if _, err := OpenCycleLog(int(os.Stdin.Fd()), 0); err == nil {
		t.Error("stdin taken for a cycle board")
	}
}

// BenchmarkCycleLogAdd is what a consumer pays per cycle on the board; a
// report on the pipe is a write system call and a wake-up of the master.
func BenchmarkCycleLogAdd(b *testing.B) {
	board, err := NewCycleBoard(1)
	if err != nil {
		b.Fatal(err)
	}
	defer board.Close()
	l, err := OpenCycleLog(int(board.File.Fd()), 0)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	for b.Loop() {
		l.Add(1000, time.Millisecond)
	}
}

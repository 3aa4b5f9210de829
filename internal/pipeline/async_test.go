package pipeline

import (
	"context"
	"sync"
	"testing"
	"time"
)

// blocking is a sink that holds each tick until released.
type blocking struct {
	mu      sync.Mutex
	seen    []pair
	entered chan struct{}
	release chan struct{}
}

func (b *blocking) Observe(prev, cur *Tick) {
	b.mu.Lock()
	b.seen = append(b.seen, pair{prev, cur})
	b.mu.Unlock()
	b.entered <- struct{}{}
	<-b.release
}

// A blocked stage does not hold the pipeline up: the ticks handed to it
// meanwhile collapse into the newest, with the prev of the first it missed,
// and the misses are counted.
func TestAsyncSeesTheNewestTickAndNeverBlocks(t *testing.T) {
	b := &blocking{entered: make(chan struct{}), release: make(chan struct{})}
	a := NewAsync(b)
	ctx, cancel := context.WithCancel(context.Background())
	a.running.Store(true)
	done := make(chan struct{})
	go func() { a.run(ctx); close(done) }()

	ticks := []*Tick{{}, {}, {}, {}}
	a.Observe(nil, ticks[0])
	<-b.entered // the stage holds tick 0
	handed := make(chan struct{})
	go func() {
		a.Observe(ticks[0], ticks[1])
		a.Observe(ticks[1], ticks[2])
		a.Observe(ticks[2], ticks[3])
		close(handed)
	}()
	select {
	case <-handed:
	case <-time.After(5 * time.Second):
		t.Fatal("Observe blocked behind a busy stage")
	}
	b.release <- struct{}{}
	<-b.entered
	b.release <- struct{}{}
	cancel()
	<-done

	if len(b.seen) != 2 || b.seen[0].cur != ticks[0] || b.seen[1].cur != ticks[3] {
		t.Fatalf("the stage saw %d ticks; want tick 0 and then the newest, 3", len(b.seen))
	}
	if b.seen[1].prev != ticks[0] {
		t.Error("the newest tick's prev is not the last tick the stage saw (0)")
	}
	if got := a.Skipped(); got != 2 {
		t.Errorf("skipped %d, want 2 (ticks 1 and 2)", got)
	}
}

// Outside Run (a test stepping the pipeline by hand) the stage observes on
// the caller's goroutine, so a step's sinks have all seen its tick.
func TestAsyncOutsideRunObservesInline(t *testing.T) {
	r := &recorder{}
	a := NewAsync(r)
	tick := &Tick{}
	a.Observe(nil, tick)
	if len(r.cur) != 1 || r.cur[0] != tick {
		t.Fatalf("the sink saw %d ticks; want the one handed", len(r.cur))
	}
}

// Run starts an asynchronous sink beside the steps and stops it before
// it returns: it sees the ticks while the pipeline runs, and, stopped,
// observes in line again.
func TestRunStartsAndStopsTheAsyncSinks(t *testing.T) {
	r := &recorder{}
	var mu sync.Mutex
	seen := 0
	a := NewAsync(SinkFunc(func(prev, cur *Tick) {
		mu.Lock()
		seen++
		mu.Unlock()
		r.Observe(prev, cur)
	}))
	p := New(Config{Sampler: newSampler(t), Sinks: []Sink{a}, Interval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := seen
		mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the async sink saw %d ticks in 10 s of a 10 ms pipeline", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return once its context ended")
	}
	if a.running.Load() {
		t.Error("the async sink still runs after Run returned")
	}
}

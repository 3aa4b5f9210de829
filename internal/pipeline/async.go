package pipeline

import (
	"context"
	"sync"
	"sync/atomic"
)

// Async is a sink that may block (one that writes to cgroups or reads
// /proc, such as a run's policy): the pipeline hands it each tick and goes
// on, and it works on its own goroutine, which Pipeline.Run starts and
// stops. A tick that arrives while the sink is still busy replaces the one
// waiting, so a slow sink sees the newest tick, never a queue of stale
// ones; Skipped counts the ticks it never saw. Outside Run (a test calling
// Step) it observes on the caller's goroutine.
type Async struct {
	sink    Sink
	pending chan pair // holds at most the newest tick not yet observed
	running atomic.Bool
	skipped atomic.Uint64
	mu      sync.Mutex // orders the hand-off
}

type pair struct{ prev, cur *Tick }

// NewAsync wraps sink in a stage of its own.
func NewAsync(sink Sink) *Async {
	return &Async{sink: sink, pending: make(chan pair, 1)}
}

// Observe hands the tick to the stage's goroutine without waiting.
func (a *Async) Observe(prev, cur *Tick) {
	if !a.running.Load() {
		a.sink.Observe(prev, cur)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case old := <-a.pending:
		a.skipped.Add(1)
		// The sink sees the tick before the newest as its prev, so what
		// it computes between two ticks spans the gap.
		prev = old.prev
	default:
	}
	a.pending <- pair{prev, cur}
}

// Skipped is how many ticks arrived while the stage was busy and were
// replaced by a newer one.
func (a *Async) Skipped() uint64 { return a.skipped.Load() }

// run observes the handed ticks until ctx is done; a tick handed before
// ctx ended is observed first.
func (a *Async) run(ctx context.Context) {
	a.running.Store(true)
	defer a.running.Store(false)
	for {
		select {
		case p := <-a.pending:
			a.sink.Observe(p.prev, p.cur)
		case <-ctx.Done():
			select {
			case p := <-a.pending:
				a.sink.Observe(p.prev, p.cur)
			default:
			}
			return
		}
	}
}

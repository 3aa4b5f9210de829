package main

import (
	"bufio"
	"io"
	"sync/atomic"
	"time"
)

// pacerCheckEvery is how many ops pass between a pacer's clock reads: at
// 10^5 ops a second, one read every 160 µs.
const pacerCheckEvery = 16

// pacer holds a loop to a rate: every pacerCheckEvery ops it sleeps off
// any lead over the schedule, so ops come in bursts of that many at most.
// A nil pacer never waits.
type pacer struct {
	start time.Time
	every time.Duration // between two ops on schedule
	ops   int64
}

func newPacer(perSecond float64) *pacer {
	if perSecond <= 0 {
		return nil
	}
	return &pacer{every: time.Duration(float64(time.Second) / perSecond)}
}

// wait counts one op and sleeps when the loop is ahead of the schedule.
func (p *pacer) wait() {
	if p == nil {
		return
	}
	if p.ops == 0 { // the schedule starts at the first op, after any fill
		p.start = time.Now()
	}
	p.ops++
	if p.ops%pacerCheckEvery != 0 {
		return
	}
	if lead := time.Until(p.start.Add(time.Duration(p.ops) * p.every)); lead > 0 {
		time.Sleep(lead)
	}
}

// stopped ends a child's loops early: set when its stdin closes, which is
// how the cost curves stop many children at once, each cleaning up after
// itself (a killed filemajor child would leave its file behind).
var stopped atomic.Bool

// stopOnEOF sets stopped once r reaches its end or fails.
func stopOnEOF(r io.Reader) {
	go func() {
		_, _ = io.Copy(io.Discard, bufio.NewReader(r))
		stopped.Store(true)
	}()
}

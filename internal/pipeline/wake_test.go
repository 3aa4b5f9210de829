package pipeline

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
)

// A wake steps the pipeline before its tick, but not within MinWakeGap of
// the last step, nor while the detector already says thrashing.
func TestWakeStepsEarly(t *testing.T) {
	var mu sync.Mutex
	var steps []time.Time
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(steps)
	}
	wake := make(chan struct{}, 1)
	sink := SinkFunc(func(_, _ *Tick) {
		mu.Lock()
		steps = append(steps, time.Now())
		mu.Unlock()
	})
	p := New(Config{Sampler: newSampler(t), Sinks: []Sink{sink}, Interval: time.Hour, Wake: wake})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitSteps := func(n int, within time.Duration) bool {
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if count() >= n {
				return true
			}
		}
		return false
	}
	if !waitSteps(1, 10*time.Second) {
		t.Fatal("no first step")
	}
	wake <- struct{}{} // within the gap: not taken
	if waitSteps(2, MinWakeGap/2) {
		t.Fatal("a wake within MinWakeGap of the last step was taken")
	}
	time.Sleep(MinWakeGap)
	wake <- struct{}{}
	if !waitSteps(2, 5*time.Second) {
		t.Fatal("a wake past MinWakeGap brought no step in 5 s of a 1 h interval")
	}
	if p.Wakes() != 1 {
		t.Errorf("Wakes() = %d, want 1", p.Wakes())
	}

	// Thrashing already: a wake brings nothing.
	p.mu.Lock()
	p.latest = &Tick{Verdict: &indicators.Verdict{State: indicators.Thrashing}}
	p.mu.Unlock()
	time.Sleep(MinWakeGap)
	wake <- struct{}{}
	if waitSteps(3, 2*MinWakeGap) {
		t.Error("a wake was taken while the detector said thrashing")
	}
}

// The gap a wake needs runs from the start of the last step, not its end:
// a wake MinWakeGap after a slow step began is taken, as the probes send
// them MinWakeGap apart through a thrash's first second.
func TestWakeGapFromTheStepsStart(t *testing.T) {
	var mu sync.Mutex
	var began []time.Time
	wake := make(chan struct{}, 1)
	slow := SinkFunc(func(_, _ *Tick) {
		mu.Lock()
		began = append(began, time.Now())
		n := len(began)
		mu.Unlock()
		if n == 1 {
			time.Sleep(150 * time.Millisecond) // a slow sample
		}
	})
	p := New(Config{Sampler: newSampler(t), Sinks: []Sink{slow}, Interval: time.Hour, Wake: wake})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(began)
	}
	for deadline := time.Now().Add(10 * time.Second); count() < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no first step")
		}
	}
	mu.Lock()
	first := began[0]
	mu.Unlock()
	time.Sleep(time.Until(first.Add(MinWakeGap)))
	wake <- struct{}{}
	for deadline := time.Now().Add(5 * time.Second); count() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a wake MinWakeGap after a slow step began brought no step")
		}
	}
}

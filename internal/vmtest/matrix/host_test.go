package main

import (
	"testing"
	"time"
)

// Over 100 s of 2 CPUs: 150 CPU s busy, of which 120 the guests', 10
// stolen.
func TestHostMeanwhile(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	a := hostSample{at: t0, busy: 1000, steal: 5, total: 3000}
	b := hostSample{at: t0.Add(100 * time.Second), busy: 1150, steal: 15, total: 3200}
	if got, want := hostMeanwhile(a, b, 120*time.Second), "qemu 1.20 of 2 CPUs, others 0.30, stolen 0.10"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := hostMeanwhile(b, a, 0); got != "" {
		t.Errorf("samples out of order gave %q, want nothing", got)
	}
}

// The sample reads this host's own files.
func TestSampleHost(t *testing.T) {
	s, err := sampleHost()
	if err != nil {
		t.Fatal(err)
	}
	if s.total <= 0 || s.busy <= 0 || s.busy > s.total {
		t.Errorf("busy %.0f of %.0f CPU s: want a part of a positive total", s.busy, s.total)
	}
}

package main

import (
	"strings"
	"testing"
	"time"
)

func TestReport(t *testing.T) {
	var b strings.Builder
	report(&b, []detection{
		{name: "thrashing_state=2", after: 2 * time.Second, fired: true},
		{name: "psi some avg10 > 10%", after: 5 * time.Second, fired: true},
		{name: "node_exporter-style rule", fired: false},
	}, 3*time.Minute)
	out := b.String()
	for _, want := range []string{"2s", "1.0×", "5s", "2.5×", "not within 3m0s", "> 90.0×"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestSummarize(t *testing.T) {
	d := func(after time.Duration, fired bool) []detection {
		return []detection{{name: "thrashing_state=2", after: after, fired: fired}}
	}
	var b strings.Builder
	got := summarize(&b, [][][]detection{
		{d(800*time.Millisecond, true), d(600*time.Millisecond, true), d(time.Second, true)},
		{d(2*time.Second, true), d(0, false), d(1600*time.Millisecond, true)},
	})
	if got != 800*time.Millisecond {
		t.Errorf("judged median %v, want 800ms", got)
	}
	out := b.String()
	for _, want := range []string{"800ms (3 of 3 runs)", "1.8s (2 of 3 runs)", "0.44"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if got := summarize(&b, [][][]detection{{d(0, false), d(time.Second, true)}, {d(time.Second, true)}}); got < time.Hour {
		t.Errorf("a run the state never reached 2 in gave a judged median %v, want past any bound", got)
	}
}

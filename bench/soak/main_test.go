package main

import (
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseFlagsRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--scrape=1ms"}, "--scrape"},
		{[]string{"--every=10ms"}, "--every"},
		{[]string{"--after=2h"}, "--after"},
		{[]string{"--spec={preset:e2}"}, "--spec"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		_, err := parseFlags(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

// TestReport: a plateau with noise is flat; memory growing 3 MiB an hour
// over the second half is not, and is named.
func TestReport(t *testing.T) {
	mk := func(rssAt func(h float64) float64) []sample {
		var ss []sample
		for i := range 180 { // 30 min, every 10 s
			at := time.Duration(i) * 10 * time.Second
			noise := float64((i*7919)%5) - 2 // ±2 MiB, repeating
			ss = append(ss, sample{At: at, RSS: uint64((rssAt(at.Hours()) + noise) * (1 << 20)), FDs: 20, Goroutines: 30, HeapInuse: 12 << 20})
		}
		return ss
	}
	plateau := mk(func(h float64) float64 { return 28 + 14*math.Min(h/0.25, 1) }) // grows to 42 MiB over 15 min, then holds
	var b strings.Builder
	if !report(&b, plateau) {
		t.Errorf("a plateau is reported growing:\n%s", b.String())
	}
	leak := mk(func(h float64) float64 { return 40 + 3*h })
	b.Reset()
	if report(&b, leak) || !strings.Contains(b.String(), "rss") || !strings.Contains(b.String(), "GROWING") {
		t.Errorf("3 MiB/h is reported flat:\n%s", b.String())
	}
}

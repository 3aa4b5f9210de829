package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseFlagsRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--scale=0"}, "--scale"},
		{[]string{"--scale=2"}, "--scale"},
		{[]string{"--scrape=1ms"}, "--scrape"},
		{[]string{"--processes=-1"}, "--processes"},
		{[]string{"--processes=100000"}, "--processes"},
		{[]string{"--window=1s"}, "--window"},
		{[]string{"--runs=0"}, "--runs"},
		{[]string{"--runs=10"}, "--runs"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--max-ratio=0"}, "--max-ratio"},
		{[]string{"--max-diagnosis-share=1.5"}, "--max-diagnosis-share"},
		{[]string{"--max-rss-ratio=-1"}, "--max-rss-ratio"},
	} {
		_, err := parseFlags(append(tc.args, "--node-exporter=/bin/true"), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

func TestCostPercent(t *testing.T) {
	c := cost{Seconds: 60, ObserverCPU: 0.6, ExporterCPU: 0.9}
	if got := c.Percent(c.ObserverCPU); got != 1 {
		t.Errorf("0.6 s of CPU over 60 s = %g %%, want 1", got)
	}
	if got := (cost{}).Percent(1); got != 0 {
		t.Errorf("an empty window = %g %%, want 0", got)
	}
	var b strings.Builder
	writeCost(&b, c)
	if !strings.Contains(b.String(), "ratio            0.67") {
		t.Errorf("no ratio 0.67 in:\n%s", b.String())
	}
	b.Reset()
	c.GuardCPU = 0.15
	writeCost(&b, c)
	if !strings.Contains(b.String(), "0.50  (without the OOM guard's)") {
		t.Errorf("no ratio 0.50 without the guard in:\n%s", b.String())
	}
}

// The run part is judged on both median ratios, each named when past its
// bound.
func TestJudge(t *testing.T) {
	under := cost{Seconds: 60, ObserverCPU: 0.5, ExporterCPU: 0.9, ObserverPeakRSS: 20 << 20, Exporter: 21 << 20}
	over := cost{Seconds: 60, ObserverCPU: 1.2, ExporterCPU: 0.9, ObserverPeakRSS: 33 << 20, Exporter: 21 << 20}
	cpu, rss := medians([]cost{under})
	if err := judge(cpu, rss, 1, 1, 1); err != nil {
		t.Errorf("%v, want none under both bounds", err)
	}
	cpu, rss = medians([]cost{over})
	err := judge(cpu, rss, 1, 1, 1)
	if err == nil || !strings.Contains(err.Error(), "through the run is 1.33× node_exporter's, past --max-ratio=1") || !strings.Contains(err.Error(), "1.57× node_exporter's, past --max-rss-ratio=1") {
		t.Errorf("%v, want both ratios named", err)
	}
	if err := judge(cpu, rss, 1, 0.8, 2); err == nil || strings.Contains(err.Error(), "RSS") {
		t.Errorf("%v, want the CPU alone named", err)
	}
	// One run over the bound of three is the median's business, not a
	// failure; two are.
	cpu, rss = medians([]cost{under, over, under})
	if err := judge(cpu, rss, 3, 1, 1); err != nil {
		t.Errorf("%v, want none: the median run is under both", err)
	}
	cpu, rss = medians([]cost{over, under, over})
	if err := judge(cpu, rss, 3, 1, 1); err == nil || !strings.Contains(err.Error(), "(median of 3) is 1.33×") {
		t.Errorf("%v, want the median named", err)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		v    []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.v); got != tc.want {
			t.Errorf("median(%v) = %g, want %g", tc.v, got, tc.want)
		}
	}
}

// The run's record is read every 10 s until its planned end, then every
// second.
func TestPollWait(t *testing.T) {
	for _, tc := range []struct{ left, want time.Duration }{
		{time.Minute, 10 * time.Second},
		{10*time.Second + 1, 10 * time.Second},
		{4 * time.Second, 4 * time.Second},
		{time.Second, time.Second},
		{0, time.Second},
		{-time.Minute, time.Second},
	} {
		if got := pollWait(tc.left); got != tc.want {
			t.Errorf("pollWait(%s) = %s, want %s", tc.left, got, tc.want)
		}
	}
}

package main

import (
	"math"
	"testing"
)

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want summary
	}{
		{"empty", nil, summary{}},
		{"one", []float64{7}, summary{Median: 7, Min: 7, Max: 7}},
		{"odd count, unsorted", []float64{5, 1, 3}, summary{Median: 3, Min: 1, Max: 5}},
		{"even count averages the middle two", []float64{4, 1, 3, 10}, summary{Median: 3.5, Min: 1, Max: 10}},
		{"outlier does not move the median", []float64{100, 101, 99, 1, 100}, summary{Median: 100, Min: 1, Max: 101}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]float64(nil), tt.in...)
			if got := summarize(tt.in); got != tt.want {
				t.Errorf("summarize(%v) = %+v, want %+v", tt.in, got, tt.want)
			}
			for i := range in {
				if in[i] != tt.in[i] {
					t.Fatalf("summarize reordered its input: %v, was %v", tt.in, in)
				}
			}
		})
	}
}

func TestSpreadPercent(t *testing.T) {
	tests := []struct {
		in   summary
		want float64
	}{
		{summary{Median: 100, Min: 98, Max: 103}, 5},
		{summary{Median: 50, Min: 50, Max: 50}, 0},
		{summary{}, 0},
	}
	for _, tt := range tests {
		if got := tt.in.spreadPercent(); !approx(got, tt.want) {
			t.Errorf("%+v.spreadPercent() = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestCompare(t *testing.T) {
	tests := []struct {
		name               string
		baseline, observed float64
		want               comparison
	}{
		{"slower", 1000, 970, comparison{Ratio: 0.97, SlowdownPercent: 3}},
		{"same", 1000, 1000, comparison{Ratio: 1, SlowdownPercent: 0}},
		{"faster is a negative slowdown", 1000, 1010, comparison{Ratio: 1.01, SlowdownPercent: -1}},
		{"zero baseline", 0, 10, comparison{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := compare(tt.baseline, tt.observed)
			if !approx(got.Ratio, tt.want.Ratio) || !approx(got.SlowdownPercent, tt.want.SlowdownPercent) {
				t.Errorf("compare(%v, %v) = %+v, want %+v", tt.baseline, tt.observed, got, tt.want)
			}
		})
	}
}

func approx(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPairedRatios(t *testing.T) {
	tests := []struct {
		name               string
		baseline, observed []float64
		want               []float64
	}{
		{"per round", []float64{100, 200, 400}, []float64{90, 190, 400}, []float64{0.9, 0.95, 1}},
		// Drift: the host slows by half between rounds. The medians'
		// ratio mixes rounds; each pair still reads 0.98.
		{"drift cancels within a pair", []float64{1000, 500, 250}, []float64{980, 490, 245}, []float64{0.98, 0.98, 0.98}},
		{"baseline only", []float64{1, 2}, nil, nil},
		{"zero baseline is left out", []float64{0, 10}, []float64{5, 9}, []float64{0.9}},
		{"unpaired tail is left out", []float64{10, 10, 10}, []float64{9, 11}, []float64{0.9, 1.1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := pairedRatios(tt.baseline, tt.observed)
			if len(got) != len(tt.want) {
				t.Fatalf("pairedRatios = %v, want %v", got, tt.want)
			}
			for i := range got {
				if !approx(got[i], tt.want[i]) {
					t.Errorf("pairedRatios = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestComparePaired(t *testing.T) {
	// Baseline drifts from 1000 to 800 ops/s; the observer costs 2% in
	// every round. The ratio of medians (900 vs 880) shows 2.2%; one
	// outlier round does not move the paired median.
	base := []float64{1000, 900, 800, 1000, 900}
	obs := []float64{980, 882, 784, 700, 880}
	p := comparePaired(base, obs)
	if p == nil || !approx(p.Ratio.Median, 0.98) || !approx(p.Ratio.Min, 0.7) || !approx(p.Ratio.Max, 0.98) || !approx(p.SlowdownPercent, 2) {
		t.Errorf("comparePaired = %+v, want median 0.98 (0.7..0.98), 2%% slowdown", p)
	}
	if p := comparePaired([]float64{1}, nil); p != nil {
		t.Errorf("baseline only: %+v, want nil", p)
	}
}

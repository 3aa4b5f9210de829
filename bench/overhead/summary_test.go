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

package main

import "slices"

// summary is how a set of rounds is reported: the median as the figure, min
// and max so a reader can judge a ratio against the noise behind it.
type summary struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// summarize returns the median, min and max of xs; the zero summary when xs
// is empty.
func summarize(xs []float64) summary {
	if len(xs) == 0 {
		return summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	median := s[n/2]
	if n%2 == 0 {
		median = (s[n/2-1] + s[n/2]) / 2
	}
	return summary{Median: median, Min: s[0], Max: s[n-1]}
}

// spreadPercent is max-min as a percentage of the median: the width of the
// noise band, directly comparable with a slowdown percentage.
func (s summary) spreadPercent() float64 {
	if s.Median == 0 {
		return 0
	}
	return (s.Max - s.Min) / s.Median * 100
}

// comparison is observed against baseline for one workload.
type comparison struct {
	Ratio           float64 `json:"ratio"`
	SlowdownPercent float64 `json:"slowdown_percent"`
}

// compare returns observed/baseline and the slowdown it means; a negative
// slowdown is the observed side running faster, i.e. noise. A zero baseline
// (never produced: a child reporting no ops is an error) compares as zero,
// since JSON has no NaN.
func compare(baseline, observed float64) comparison {
	if baseline == 0 {
		return comparison{}
	}
	r := observed / baseline
	return comparison{Ratio: r, SlowdownPercent: (1 - r) * 100}
}

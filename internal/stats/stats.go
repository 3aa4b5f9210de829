// Package stats holds thrashscope's one summary of repeated figures: the
// mean and the sample standard deviation, as the seeds report over their
// repeats. It is written out here rather than taken from gonum/stat, which
// would link gonum's linear algebra into the daemon (the run engine sums up
// cycle times with it) for two loops.
package stats

import "math"

// MeanSD is the mean and the sample standard deviation (n-1) of xs; the SD
// is 0 for one value, as there is no spread to estimate, and both are NaN
// for none.
func MeanSD(xs []float64) (mean, sd float64) {
	switch len(xs) {
	case 0:
		return math.NaN(), math.NaN()
	case 1:
		return xs[0], 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(xs)-1))
}

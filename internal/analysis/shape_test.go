package analysis

import (
	"math"
	"testing"
)

func TestMovingMean(t *testing.T) {
	xs := []float64{0, 1, 2, 3, 4}
	got := movingMean(xs, []float64{0, 0, 10, 0, 0}, 1)
	want := []float64{0, 10.0 / 3, 10.0 / 3, 10.0 / 3, 0}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Fatalf("%v, want %v", got, want)
		}
	}
}

package compare

import (
	"math"
	"testing"
)

// The interval of 1, 2, 3 (SD 1): t(0.975, 2) = 4.3027 over √3.
func TestCI95(t *testing.T) {
	if got, want := ci95([]float64{1, 2, 3}), 4.302653/math.Sqrt(3); math.Abs(got-want) > 1e-5 {
		t.Errorf("ci95 = %v, want %v", got, want)
	}
	if !math.IsNaN(ci95([]float64{1})) {
		t.Error("one value has no interval")
	}
}

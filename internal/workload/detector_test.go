package workload

import (
	"strings"
	"testing"

	"github.com/thrashscope/thrashscope/internal/indicators"
)

func TestJudge(t *testing.T) {
	cfg := indicators.DefaultDetectorConfig() // faults 10 and 1 /s, PSI full 10 % and 5 %
	const N, M, T = indicators.Normal, indicators.Monitoring, indicators.Thrashing
	for _, c := range []struct {
		name         string
		prev         int
		faults, full float64
		held         int
		want         int
		reason       string
	}{
		{"quiet", N, 0, 0, 0, N, ""},
		{"faults alone (a cold start, a streaming read)", N, 500, 1, 0, M, "major faults 500/s"},
		{"pressure alone", N, 2, 30, 0, M, "memory full 30%"},
		{"pressure past the low mark", N, 0, 6, 0, M, "memory full 6%"},
		{"both high", N, 500, 30, 0, T, "major faults 500/s"},
		{"both high, the other reason", M, 500, 30, 0, T, "memory full 30%"},
		{"thrashing holds between the marks", T, 5, 7, 0, T, "memory full 7%"},
		{"over once faults fall under their low mark", T, 0.5, 30, 0, M, "memory full 30%"},
		{"over once pressure falls under its low mark", T, 500, 4, 0, M, "major faults 500/s"},
		{"all clear", T, 0, 0, 0, N, ""},
		{"two of the thrashing host's high-fault set, before PSI", N, 120, 0, 2, T, "2 of the thrashing host's high-fault processes"},
		{"one of them is not enough", N, 120, 0, 1, M, "major faults 120/s"},
		{"held while they stay", T, 120, 0, 3, T, "3 of the thrashing host's"},
	} {
		got, reasons := judge(cfg, c.prev, c.faults, c.full, c.held)
		joined := strings.Join(reasons, "; ")
		if got != c.want || (c.reason == "") != (joined == "") || !strings.Contains(joined, c.reason) {
			t.Errorf("%s: %v %q, want %v with %q", c.name, got, joined, c.want, c.reason)
		}
	}
}

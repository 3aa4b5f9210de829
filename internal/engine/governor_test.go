package engine

import (
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/sampler"
)

func TestPolicyTick(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) *time.Time { v := t0.Add(time.Duration(s) * time.Second); return &v }
	rec := run.Record{
		Spec: run.Resolved{SizeBytes: 200 << 20, MemoryLimitBytes: 256 << 20, Policy: "tpf"},
		Consumers: []run.ConsumerRecord{
			{Index: 0, PID: 100, ActualStart: at(0)},                               // active
			{Index: 1, PID: 101, ActualStart: at(1), ActualEnd: at(9), Exit: "ok"}, // ended
			{Index: 2, PID: 102, ActualStart: at(2)},                               // active, not read this tick
			{Index: 3},                                                             // not started
		},
	}
	tick := &pipeline.Tick{
		Reading: &sampler.Reading{Time: t0.Add(10 * time.Second), HasRates: true,
			Rates: sampler.Rates{CPUBusyPercent: 42},
			Processes: []sampler.Process{
				{Process: procfs.Process{PID: 100, ResidentBytes: 150 << 20}, HasRates: true, Rates: sampler.ProcessRates{MajFlt: 300}},
				{Process: procfs.Process{PID: 999, ResidentBytes: 1 << 30}, HasRates: true, Rates: sampler.ProcessRates{MajFlt: 7}},
			}},
		Verdict: &indicators.Verdict{State: indicators.Thrashing, Processes: map[int]indicators.ProcessVerdict{100: {HighFault: true}}},
	}
	swap := map[int]int64{100: 40 << 20, 102: 5 << 20}
	own := func(pid int) (int64, int64, bool) { return swap[pid] * 3, swap[pid], true }
	got := policyTick(tick, rec, 250<<20, own)
	if !got.Thrashing || got.CPUBusyPercent != 42 || got.LimitBytes != 256<<20 || got.FreeBytes != 6<<20 || !got.Now.Equal(t0.Add(10*time.Second)) {
		t.Errorf("tick %+v: want thrashing, 42 %% busy, 256 MiB limit with 6 MiB free, at t0+10s", got)
	}
	if len(got.Consumers) != 2 {
		t.Fatalf("consumers %+v: want the two active ones, 0 and 2", got.Consumers)
	}
	c0, c2 := got.Consumers[0], got.Consumers[1]
	if c0.Index != 0 || c0.ResidentBytes != 150<<20 || c0.OwnResidentBytes != 120<<20 || c0.SwapBytes != 40<<20 || c0.SwapInRate != 300 || !c0.HighFault || c0.DemandBytes != 200<<20 || !c0.Since.Equal(t0) {
		t.Errorf("consumer 0: %+v", c0)
	}
	if c2.Index != 2 || c2.ResidentBytes != 0 || c2.OwnResidentBytes != 15<<20 || c2.SwapBytes != 5<<20 || c2.SwapInRate != 0 || c2.HighFault {
		t.Errorf("consumer 2 (not read this tick): %+v, want its swap and zeros", c2)
	}
	if full := policyTick(tick, rec, 300<<20, nil); full.FreeBytes != 0 || full.Consumers[0].SwapBytes != 0 {
		t.Errorf("usage past the limit, no sizes read: free %d, %+v; want 0 free, no swap", full.FreeBytes, full.Consumers[0])
	}
}

func TestPolicyLine(t *testing.T) {
	for _, c := range []struct {
		s    run.PolicyState
		want string
	}{
		{run.PolicyState{Policy: "none"}, ""},
		{run.PolicyState{Policy: "tpf"}, "policy tpf: 0 frozen, 0 protected; no action yet"},
		{run.PolicyState{Policy: "binpack", Frozen: 8, Bin: 2, Bins: 3, Last: &run.Decision{Kind: "thaw", Consumer: 4, Why: "bin 2 of 3"}},
			"policy binpack: 8 frozen, 0 protected, bin 2 of 3 running; last: thaw consumer 4 (bin 2 of 3)"},
	} {
		if got := PolicyLine(c.s); got != c.want {
			t.Errorf("PolicyLine(%+v) = %q, want %q", c.s, got, c.want)
		}
	}
}

package main

import (
	"testing"
)

func TestAttributedPercent(t *testing.T) {
	tests := []struct {
		name      string
		bpfNs     float64
		ops       uint64
		opsPerSec float64
		want      float64
	}{
		// 1e6 ops at 250k ops/s: 4 µs an op, 4 s in all; 120 ms of BPF is 3%.
		{"three percent", 120e6, 1_000_000, 250_000, 3},
		// 2 round trips' worth of 150 ns programs in a 5 µs op: 6%.
		{"per-op view", 300 * 400_000, 400_000, 200_000, 6},
		{"no BPF time", 0, 1000, 1000, 0},
		{"no ops", 1e6, 0, 1000, 0},
		{"no rate", 1e6, 1000, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := attributedPercent(tt.bpfNs, tt.ops, tt.opsPerSec); !approx(got, tt.want) {
				t.Errorf("attributedPercent(%v, %d, %v) = %v, want %v", tt.bpfNs, tt.ops, tt.opsPerSec, got, tt.want)
			}
		})
	}
}

func TestNewBPFRound(t *testing.T) {
	res := workloadResult{Workload: "faults", Ops: 1_000_000, Seconds: 4, OpsPerSec: 250_000}
	before := countersSnapshot{
		1: {Name: "fault_entry_user", Runs: 50, RunTimeNs: 5000},
		2: {Name: "memory_stall", Runs: 10, RunTimeNs: 2000},
	}
	after := countersSnapshot{
		1: {Name: "fault_entry_user", Runs: 1_000_050, RunTimeNs: 100_005_000},
		2: {Name: "memory_stall", Runs: 20_010, RunTimeNs: 4_002_000},
	}
	r, err := newBPFRound(res, before, after)
	if err != nil {
		t.Fatal(err)
	}
	// 104 ms of BPF over a 4 s window.
	if r.Ops != res.Ops || r.Seconds != 4 || len(r.Programs) != 2 || !approx(r.AttributedPercent, 2.6) {
		t.Errorf("round = %+v, want 2.6%% attributed", r)
	}
	if _, err := newBPFRound(res, nil, after); err == nil {
		t.Error("no error without an opening reading")
	}
}

func TestNewBPFAttribution(t *testing.T) {
	prog := func(name string, runs, ns uint64) programCounters {
		return programCounters{Name: name, Runs: runs, RunTimeNs: ns}
	}
	round := func(ops uint64, seconds float64, progs ...programCounters) bpfRound {
		r := bpfRound{Ops: ops, Seconds: seconds, OpsPerSec: float64(ops) / seconds, Programs: progs}
		r.AttributedPercent = attributedPercent(float64(totalRunTimeNs(progs)), ops, r.OpsPerSec)
		return r
	}
	type progWant struct {
		name                                  string
		runsPerOp, nsPerRun, nsPerOp, percent float64
	}
	tests := []struct {
		name                            string
		rounds                          []bpfRound
		nsPerOp, bpfNsPerOp, percent    float64
		roundsMin, roundsMed, roundsMax float64
		programs                        []progWant
	}{
		{
			// faults: one fault_entry_user run per page, 100 ns each, in a
			// 4 µs op; memory_stall from the rest of the host.
			name: "faults",
			rounds: []bpfRound{
				round(1_000_000, 4, prog("fault_entry_user", 1_000_000, 100e6), prog("memory_stall", 4000, 0.8e6)),
				round(1_000_000, 4, prog("fault_entry_user", 1_000_000, 120e6), prog("memory_stall", 6000, 1.2e6)),
			},
			nsPerOp: 4000, bpfNsPerOp: 111, percent: 2.775,
			roundsMin: 2.52, roundsMed: 2.775, roundsMax: 3.03,
			programs: []progWant{
				{"fault_entry_user", 1, 110, 110, 2.75},
				{"memory_stall", 0.005, 200, 1, 0.025},
			},
		},
		{
			// Pooling weighs rounds by their time: a long slow round
			// counts for more than a short fast one.
			name: "uneven rounds",
			rounds: []bpfRound{
				round(100, 1, prog("memory_stall", 200, 10e6)),  // 1%
				round(900, 3, prog("memory_stall", 1800, 90e6)), // 3%
			},
			nsPerOp: 4e6, bpfNsPerOp: 100e3, percent: 2.5,
			roundsMin: 1, roundsMed: 2, roundsMax: 3,
			programs: []progWant{{"memory_stall", 2, 50e3, 100e3, 2.5}},
		},
		{
			name: "program that never ran",
			rounds: []bpfRound{
				round(10, 1, prog("fault_entry_user", 10, 1000), prog("major_fault", 0, 0)),
			},
			nsPerOp: 1e8, bpfNsPerOp: 100, percent: 1e-4,
			roundsMin: 1e-4, roundsMed: 1e-4, roundsMax: 1e-4,
			programs: []progWant{
				{"fault_entry_user", 1, 100, 100, 1e-4},
				{"major_fault", 0, 0, 0, 0},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newBPFAttribution(tt.rounds)
			if a.Windows != len(tt.rounds) || !approx(a.NsPerOp, tt.nsPerOp) || !approx(a.BPFNsPerOp, tt.bpfNsPerOp) || !approx(a.AttributedPercent, tt.percent) {
				t.Errorf("windows=%d ns/op=%v bpf ns/op=%v attributed=%v%%; want ns/op=%v bpf ns/op=%v attributed=%v%%",
					a.Windows, a.NsPerOp, a.BPFNsPerOp, a.AttributedPercent, tt.nsPerOp, tt.bpfNsPerOp, tt.percent)
			}
			if r := a.RoundsPercent; !approx(r.Min, tt.roundsMin) || !approx(r.Median, tt.roundsMed) || !approx(r.Max, tt.roundsMax) {
				t.Errorf("rounds = %+v, want %v..%v..%v", r, tt.roundsMin, tt.roundsMed, tt.roundsMax)
			}
			if len(a.Programs) != len(tt.programs) {
				t.Fatalf("programs = %+v, want %d", a.Programs, len(tt.programs))
			}
			var sum float64
			for i, w := range tt.programs {
				p := a.Programs[i]
				sum += p.AttributedPercent
				if p.Name != w.name || !approx(p.RunsPerOp, w.runsPerOp) || !approx(p.NsPerRun, w.nsPerRun) ||
					!approx(p.NsPerOp, w.nsPerOp) || !approx(p.AttributedPercent, w.percent) {
					t.Errorf("program %d = %+v, want %+v", i, p, w)
				}
			}
			if !approx(sum, a.AttributedPercent) {
				t.Errorf("programs' shares add up to %v%%, the total is %v%%", sum, a.AttributedPercent)
			}
		})
	}
	if a := newBPFAttribution(nil); a != nil {
		t.Errorf("no rounds: %+v, want nil", a)
	}
}

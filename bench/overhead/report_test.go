package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// bpfRoundOf is one observed window in which fault_entry_user and
// memory_stall ran; its attributed share is worked out as newBPFRound does.
func bpfRoundOf(ops uint64, seconds float64, userRuns, userNs, stallRuns, stallNs uint64) bpfRound {
	r := bpfRound{Ops: ops, Seconds: seconds, OpsPerSec: float64(ops) / seconds}
	if userRuns > 0 || userNs > 0 {
		r.Programs = append(r.Programs, programCounters{Name: "fault_entry_user", Runs: userRuns, RunTimeNs: userNs})
	}
	r.Programs = append(r.Programs, programCounters{Name: "memory_stall", Runs: stallRuns, RunTimeNs: stallNs})
	r.AttributedPercent = attributedPercent(float64(totalRunTimeNs(r.Programs)), r.Ops, r.OpsPerSec)
	return r
}

func sampleReport() *report {
	idle := selfCost{CPUTicks: 1, Seconds: 5, RSSKiB: 14 * 1024, HWMKiB: 18 * 1024}
	faultsCost := selfCost{CPUTicks: 10, Seconds: 25, RSSKiB: 15 * 1024, HWMKiB: 19 * 1024}
	ctxCost := selfCost{CPUTicks: 40, Seconds: 25, RSSKiB: 15 * 1024, HWMKiB: 19 * 1024}
	fig := idle.figures(100)
	r := &report{
		Config: reportConfig{Rounds: 3, DurationSeconds: 5},
		Floor:  &floorFigures{Runs: 1000, RunTimeNs: 50000, NsPerRun: 50, ClockNs: 40},
		Idle:   &fig,
		Workloads: []workloadReport{
			// BPF: 79e6 ns over 4 s of windows, 1.975%.
			newWorkloadReport("faults", []float64{1000, 990, 1010}, []float64{985, 980, 990}, []bpfRound{
				bpfRoundOf(1000, 1, 1000, 20e6, 10, 1e6), // 2.1%
				bpfRoundOf(2000, 2, 2000, 30e6, 20, 2e6), // 1.6%
				bpfRoundOf(1000, 1, 1000, 25e6, 10, 1e6), // 2.6%
			}, faultsCost, 100),
			// BPF: 120e6 ns over 3 s of windows, 4%.
			newWorkloadReport("ctxswitch", []float64{200, 204, 196}, []float64{190, 192, 188}, []bpfRound{
				bpfRoundOf(200, 1, 0, 0, 400, 40e6),
				bpfRoundOf(200, 1, 0, 0, 400, 30e6),
				bpfRoundOf(200, 1, 0, 0, 400, 50e6),
			}, ctxCost, 100),
		},
	}
	r.Targets = evaluateTargets(r)
	return r
}

func TestNewWorkloadReport(t *testing.T) {
	w := sampleReport().Workloads[0]
	if w.Baseline != (summary{Median: 1000, Min: 990, Max: 1010}) {
		t.Errorf("baseline = %+v", w.Baseline)
	}
	if *w.Observed != (summary{Median: 985, Min: 980, Max: 990}) {
		t.Errorf("observed = %+v", *w.Observed)
	}
	if !approx(w.Comparison.Ratio, 0.985) || !approx(w.Comparison.SlowdownPercent, 1.5) {
		t.Errorf("comparison = %+v", *w.Comparison)
	}
	if !approx(w.Observer.CPUPercent, 0.4) {
		t.Errorf("observer CPU = %v%%, want 0.4%%", w.Observer.CPUPercent)
	}
	// Per-round ratios 0.985, 0.98990, 0.98020.
	if p := w.Paired; p == nil || len(p.Ratios) != 3 || !approx(p.Ratio.Median, 0.985) ||
		!approx(p.Ratio.Min, 990.0/1010) || !approx(p.Ratio.Max, 980.0/990) || !approx(p.SlowdownPercent, 1.5) {
		t.Errorf("paired = %+v", w.Paired)
	}
	if w.BPF == nil || !approx(w.BPF.AttributedPercent, 1.975) {
		t.Errorf("bpf = %+v, want 1.975%% attributed", w.BPF)
	}

	base := newWorkloadReport("faults", []float64{1, 2, 3}, nil, nil, selfCost{}, 100)
	if base.Observed != nil || base.Comparison != nil || base.Observer != nil || base.Paired != nil || base.BPF != nil {
		t.Errorf("baseline-only report has observed figures: %+v", base)
	}
}

func TestEvaluateTargets(t *testing.T) {
	got := map[string]bool{}
	for _, tg := range sampleReport().Targets {
		got[tg.Name] = tg.Pass
	}
	want := map[string]bool{
		"faults BPF time per op":       true,  // 1.975%
		"ctxswitch BPF time per op":    false, // 4%
		"faults A/B slowdown":          true,  // 1.5%, noisy
		"ctxswitch A/B slowdown":       false, // 5%, noisy
		"observer CPU idle":            true,  // 0.2%
		"observer CPU under faults":    true,  // 0.4%
		"observer CPU under ctxswitch": false, // 1.6%
		"observer peak RSS":            true,  // 19 MiB
	}
	if len(got) != len(want) {
		t.Errorf("targets %v, want %v", got, want)
	}
	for name, pass := range want {
		if p, ok := got[name]; !ok || p != pass {
			t.Errorf("target %q: pass=%v present=%v, want pass=%v", name, p, ok, pass)
		}
	}
}

func TestEvaluateTargetsBoundaries(t *testing.T) {
	tests := []struct {
		name     string
		bpf      float64
		slowdown float64
		cpu      float64
		rssMiB   float64
		want     []bool // BPF time per op, A/B slowdown, CPU, RSS
	}{
		{"exactly at the BPF time limit passes", 3, 0, 0.5, 10, []bool{true, true, true, true}},
		{"just over the BPF time limit fails", 3.001, 0, 0.5, 10, []bool{false, true, true, true}},
		{"exactly at the slowdown limit passes", 0, 3, 0.5, 10, []bool{true, true, true, true}},
		{"exactly at the CPU limit fails", 0, 0, 1, 10, []bool{true, true, false, true}},
		{"exactly at the RSS limit fails", 0, 0, 0, 50, []bool{true, true, true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &report{Workloads: []workloadReport{{
				Name:       "faults",
				Comparison: &comparison{SlowdownPercent: tt.slowdown},
				BPF:        &bpfAttribution{AttributedPercent: tt.bpf},
				Observer:   &selfCostFigures{CPUPercent: tt.cpu, PeakRSSMiB: tt.rssMiB},
			}}}
			ts := evaluateTargets(r)
			if len(ts) != len(tt.want) {
				t.Fatalf("%d targets, want %d: %+v", len(ts), len(tt.want), ts)
			}
			for i, pass := range tt.want {
				if ts[i].Pass != pass {
					t.Errorf("%s: pass=%v, want %v", ts[i].Name, ts[i].Pass, pass)
				}
				if wantNoisy := i == 1; ts[i].Noisy != wantNoisy {
					t.Errorf("%s: noisy=%v, want %v", ts[i].Name, ts[i].Noisy, wantNoisy)
				}
			}
		})
	}
}

func TestWriteTable(t *testing.T) {
	var b strings.Builder
	if err := writeTable(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	want := `A/B timing (noisy: a slowdown inside the spread cannot be told from noise; the targets use BPF time per op below)
workload    baseline ops/s   observed ops/s   ratio   slowdown   paired ratio (min..max)   paired slowdown   spread(base)       spread(obs)
faults      1000             985              0.985   1.5%       0.985 (0.980..0.990)      1.5%              990..1010 (2.0%)   980..990 (1.0%)
ctxswitch   200              190              0.950   5.0%       0.950 (0.941..0.959)      5.0%              196..204 (4.0%)    188..192 (2.1%)
(medians of 3 rounds of 5s; ratio is median observed over median baseline, paired ratio the median of
 each round's observed/baseline; spread is min..max of the rounds and its width as % of the median)

BPF program cost   program            runs/op   ns/run   BPF ns/op   share of op
faults             fault_entry_user   1.000     18750    18750.0     1.88%
faults             memory_stall       0.010     100000   1000.0      0.10%
ctxswitch          memory_stall       2.000     100000   200000.0    4.00%

BPF time per op   BPF ns/op   of which floor   op ns (observed)   share of op   rounds (min..max)
faults            19750.0     50.5             1000000.0          1.98%         1.60..2.60%
ctxswitch         200000.0    100.0            5000000.0          4.00%         3.00..5.00%
(floor: an empty program on page_fault_user, 50 ns a run over 1000 runs, what bpf_stats charges any run here
 before its body does anything; of which floor is that times the op's program runs; a clock read adds 40 ns)
(kernel run_time_ns and run_cnt of the observer's programs over the observed windows, runs from every task
 included; op ns is 1e9 / observed ops/s; run_time_ns leaves out the tracepoint and perf dispatch around each
 program and includes the statistics' own clock reads: an estimate of the program bodies, see bench/README.md)

observer self-cost   CPU, % of one core   RSS MiB   peak RSS MiB
idle                 0.20%                14.0      18.0
under faults         0.40%                15.0      19.0
under ctxswitch      1.60%                15.0      19.0
(CPU is utime+stime over the measured windows; RSS the largest VmRSS seen in them; peak RSS is VmHWM, start-up included)

target                         value      limit      verdict
faults BPF time per op         1.98%      <= 3%      PASS
ctxswitch BPF time per op      4.00%      <= 3%      FAIL
faults A/B slowdown            1.5%       <= 3%      (PASS)   noisy, not counted: spread 2.0%, paired slowdown 1.5%
ctxswitch A/B slowdown         5.0%       <= 3%      (FAIL)   noisy, not counted: spread 4.0%, paired slowdown 5.0%
observer CPU idle              0.20%      < 1%       PASS
observer CPU under faults      0.40%      < 1%       PASS
observer CPU under ctxswitch   1.60%      < 1%       FAIL
observer peak RSS              19.0 MiB   < 50 MiB   PASS
overall: FAIL (2 of 6 targets missed; 2 noisy A/B lines not counted)
`
	if got := b.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestWriteTableBaselineOnly(t *testing.T) {
	r := &report{
		Config:    reportConfig{Rounds: 2, DurationSeconds: 1, BaselineOnly: true},
		Workloads: []workloadReport{newWorkloadReport("faults", []float64{100, 110}, nil, nil, selfCost{}, 100)},
	}
	r.Targets = evaluateTargets(r)
	var b strings.Builder
	if err := writeTable(&b, r); err != nil {
		t.Fatal(err)
	}
	want := `workload   baseline ops/s   observed ops/s   ratio   slowdown   paired ratio (min..max)   paired slowdown   spread(base)      spread(obs)
faults     105              -                -       -          -                         -                 100..110 (9.5%)   -
(medians of 2 rounds of 1s; ratio is median observed over median baseline, paired ratio the median of
 each round's observed/baseline; spread is min..max of the rounds and its width as % of the median)
`
	if got := b.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestReportJSON(t *testing.T) {
	b, err := json.Marshal(sampleReport())
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Workloads []struct {
			Name       string `json:"name"`
			Comparison struct {
				Ratio float64 `json:"ratio"`
			} `json:"comparison"`
			Paired struct {
				Ratios []float64 `json:"ratios"`
				Ratio  struct {
					Median float64 `json:"median"`
				} `json:"ratio"`
			} `json:"paired"`
			BPF struct {
				AttributedPercent float64 `json:"attributed_percent"`
				Programs          []struct {
					Name      string  `json:"name"`
					Runs      uint64  `json:"runs"`
					RunTimeNs uint64  `json:"run_time_ns"`
					RunsPerOp float64 `json:"runs_per_op"`
					NsPerRun  float64 `json:"ns_per_run"`
				} `json:"programs"`
				Rounds []struct {
					AttributedPercent float64 `json:"attributed_percent"`
				} `json:"rounds"`
			} `json:"bpf"`
		} `json:"workloads"`
		Idle struct {
			CPU float64 `json:"cpu_percent_of_one_core"`
		} `json:"idle_observer"`
		Targets []target `json:"targets"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Workloads) != 2 || back.Workloads[1].Name != "ctxswitch" || !approx(back.Workloads[1].Comparison.Ratio, 0.95) {
		t.Errorf("workloads = %+v", back.Workloads)
	}
	f := back.Workloads[0]
	if len(f.Paired.Ratios) != 3 || !approx(f.Paired.Ratio.Median, 0.985) {
		t.Errorf("faults paired = %+v", f.Paired)
	}
	if !approx(f.BPF.AttributedPercent, 1.975) || len(f.BPF.Rounds) != 3 || !approx(f.BPF.Rounds[0].AttributedPercent, 2.1) {
		t.Errorf("faults bpf = %+v", f.BPF)
	}
	if p := f.BPF.Programs; len(p) != 2 || p[0].Name != "fault_entry_user" || p[0].Runs != 4000 || p[0].RunTimeNs != 75e6 ||
		!approx(p[0].RunsPerOp, 1) || !approx(p[0].NsPerRun, 18750) {
		t.Errorf("faults bpf programs = %+v", p)
	}
	if !approx(back.Idle.CPU, 0.2) || len(back.Targets) != 8 {
		t.Errorf("idle = %+v, %d targets", back.Idle, len(back.Targets))
	}
}

// Major-fault workloads are judged on BPF ns per fault and their paired A/B
// slowdown, both counted; no noisy A/B line is added for them.
func TestEvaluateTargetsMajorFaults(t *testing.T) {
	for _, tt := range []struct {
		name      string
		bpfNs     float64
		paired    float64
		wantPass  [2]bool
		wantNames [2]string
	}{
		{"within", 350, 1.2, [2]bool{true, true}, [2]string{"swapin BPF time per major fault", "swapin paired A/B slowdown"}},
		{"slow probe", 6400, 1.2, [2]bool{false, true}, [2]string{"swapin BPF time per major fault", "swapin paired A/B slowdown"}},
		{"slowed faults", 900, 15, [2]bool{true, false}, [2]string{"swapin BPF time per major fault", "swapin paired A/B slowdown"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &report{Workloads: []workloadReport{{
				Name:       "swapin",
				Comparison: &comparison{SlowdownPercent: 40}, // the ratio of medians is not what counts
				Paired:     &pairedComparison{SlowdownPercent: tt.paired},
				BPF:        &bpfAttribution{BPFNsPerOp: tt.bpfNs, AttributedPercent: 99},
			}}}
			ts := evaluateTargets(r)
			if len(ts) != 2 {
				t.Fatalf("%d targets, want 2: %+v", len(ts), ts)
			}
			for i := range ts {
				if ts[i].Name != tt.wantNames[i] || ts[i].Pass != tt.wantPass[i] || ts[i].Noisy {
					t.Errorf("target %d = %+v, want %s pass=%v counted", i, ts[i], tt.wantNames[i], tt.wantPass[i])
				}
			}
		})
	}
}

package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func sampleReport() *report {
	idle := selfCost{CPUTicks: 1, Seconds: 5, RSSKiB: 14 * 1024, HWMKiB: 18 * 1024}
	faultsCost := selfCost{CPUTicks: 10, Seconds: 25, RSSKiB: 15 * 1024, HWMKiB: 19 * 1024}
	ctxCost := selfCost{CPUTicks: 40, Seconds: 25, RSSKiB: 15 * 1024, HWMKiB: 19 * 1024}
	fig := idle.figures(100)
	r := &report{
		Config: reportConfig{Rounds: 3, DurationSeconds: 5},
		Idle:   &fig,
		Workloads: []workloadReport{
			newWorkloadReport("faults", []float64{1000, 990, 1010}, []float64{985, 980, 990}, faultsCost, 100),
			newWorkloadReport("ctxswitch", []float64{200, 204, 196}, []float64{190, 192, 188}, ctxCost, 100),
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

	base := newWorkloadReport("faults", []float64{1, 2, 3}, nil, selfCost{}, 100)
	if base.Observed != nil || base.Comparison != nil || base.Observer != nil {
		t.Errorf("baseline-only report has observed figures: %+v", base)
	}
}

func TestEvaluateTargets(t *testing.T) {
	got := map[string]bool{}
	for _, tg := range sampleReport().Targets {
		got[tg.Name] = tg.Pass
	}
	want := map[string]bool{
		"faults slowdown":              true,  // 1.5%
		"ctxswitch slowdown":           false, // 5%
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
		slowdown float64
		cpu      float64
		rssMiB   float64
		want     []bool // slowdown, CPU, RSS
	}{
		{"exactly at the slowdown limit passes", 3, 0.5, 10, []bool{true, true, true}},
		{"exactly at the CPU limit fails", 0, 1, 10, []bool{true, false, true}},
		{"exactly at the RSS limit fails", 0, 0, 50, []bool{true, true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &report{Workloads: []workloadReport{{
				Name:       "faults",
				Comparison: &comparison{SlowdownPercent: tt.slowdown},
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
			}
		})
	}
}

func TestWriteTable(t *testing.T) {
	var b strings.Builder
	if err := writeTable(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	want := `workload    baseline ops/s   observed ops/s   ratio   slowdown   spread(base)       spread(obs)
faults      1000             985              0.985   1.5%       990..1010 (2.0%)   980..990 (1.0%)
ctxswitch   200              190              0.950   5.0%       196..204 (4.0%)    188..192 (2.1%)
(medians of 3 rounds of 5s; spread is min..max of the rounds and its width as % of the median)

observer self-cost   CPU, % of one core   RSS MiB   peak RSS MiB
idle                 0.20%                14.0      18.0
under faults         0.40%                15.0      19.0
under ctxswitch      1.60%                15.0      19.0
(CPU is utime+stime over the measured windows; RSS the largest VmRSS seen in them; peak RSS is VmHWM, start-up included)

target                         value      limit      verdict
faults slowdown                1.5%       <= 3%      PASS
ctxswitch slowdown             5.0%       <= 3%      FAIL
observer CPU idle              0.20%      < 1%       PASS
observer CPU under faults      0.40%      < 1%       PASS
observer CPU under ctxswitch   1.60%      < 1%       FAIL
observer peak RSS              19.0 MiB   < 50 MiB   PASS
overall: FAIL (2 of 6 targets missed)
`
	if got := b.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestWriteTableBaselineOnly(t *testing.T) {
	r := &report{
		Config:    reportConfig{Rounds: 2, DurationSeconds: 1, BaselineOnly: true},
		Workloads: []workloadReport{newWorkloadReport("faults", []float64{100, 110}, nil, selfCost{}, 100)},
	}
	r.Targets = evaluateTargets(r)
	var b strings.Builder
	if err := writeTable(&b, r); err != nil {
		t.Fatal(err)
	}
	want := `workload   baseline ops/s   observed ops/s   ratio   slowdown   spread(base)      spread(obs)
faults     105              -                -       -          100..110 (9.5%)   -
(medians of 2 rounds of 1s; spread is min..max of the rounds and its width as % of the median)
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
	if !approx(back.Idle.CPU, 0.2) || len(back.Targets) != 6 {
		t.Errorf("idle = %+v, %d targets", back.Idle, len(back.Targets))
	}
}

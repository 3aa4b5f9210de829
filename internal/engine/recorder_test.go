package engine

import (
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/sampler"
	"github.com/thrashscope/thrashscope/internal/store"
)

var start = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func at(sec float64) *time.Time {
	t := start.Add(time.Duration(sec * float64(time.Second)))
	return &t
}

func tracked(pid int, comm string, rates *sampler.ProcessRates, hasStall bool) sampler.Process {
	p := sampler.Process{HasStall: hasStall}
	p.PID, p.Comm, p.ResidentBytes, p.SwapBytes = pid, comm, 60<<20, 40<<20
	if rates != nil {
		p.Rates, p.HasRates = *rates, true
	}
	return p
}

// rowsFixture is an e4-like run 12.5 s in: consumer 0 running with rates,
// consumer 1 ended (its pid now another process's), consumer 2 started
// after the tick's reading and seen once, and a process of the host.
func rowsFixture() (*pipeline.Tick, runState) {
	spec := run.Resolved{Preset: "e4", SizeBytes: 100 << 20}
	rec := run.Record{ID: "r", Spec: spec, StartedAt: start, Consumers: []run.ConsumerRecord{
		{Index: 0, PID: 101, ActualStart: at(1)},
		{Index: 1, PID: 102, ActualStart: at(2), ActualEnd: at(10)},
		{Index: 2, PID: 103, ActualStart: at(13)},
	}}
	reading := &sampler.Reading{
		Time: *at(12.5), HasRates: true,
		Rates:  sampler.Rates{Host: sampler.Host{CPUUserPercent: 10, CPUSystemPercent: 30, SwapInPagesPerSecond: 40000, SwapOutPagesPerSecond: 39000, PressureFullPercent: 61}, Seconds: 1},
		Memory: procfs.Memory{AvailableBytes: 8 << 30, SwapFreeBytes: 3 << 30},
		Processes: []sampler.Process{
			tracked(500, "postgres", &sampler.ProcessRates{MajFlt: 9}, true),
			tracked(101, "consumer-00", &sampler.ProcessRates{MajFlt: 250, StallPercent: 40, HasStall: true}, true),
			tracked(102, "reused", &sampler.ProcessRates{MajFlt: 7}, true),
			tracked(103, "consumer-02", nil, true),
		},
	}
	verdict := &indicators.Verdict{Processes: map[int]indicators.ProcessVerdict{
		101: {WorkingSetBytes: 70 << 20, HasWorkingSet: true},
		500: {WorkingSetBytes: 1 << 20, HasWorkingSet: true},
	}}
	st := runState{
		Record:           rec,
		Progress:         run.Progress{Active: 1, Planned: 2, DemandBytes: 100 << 20},
		LivePIDs:         []int{101, 103},
		CgroupUsageBytes: 90 << 20,
	}
	return &pipeline.Tick{Reading: reading, Verdict: verdict}, st
}

func TestRowsOfATick(t *testing.T) {
	tick, st := rowsFixture()
	row, procs := rowsOf(tick, st)
	want := store.Row{
		Host:                 sampler.Host{CPUUserPercent: 10, CPUSystemPercent: 30, SwapInPagesPerSecond: 40000, SwapOutPagesPerSecond: 39000, PressureFullPercent: 61},
		ElapsedSeconds:       12.5,
		MemoryAvailableBytes: 8 << 30, SwapFreeBytes: 3 << 30,
		ConsumersActive: 1, ConsumersPlanned: 2, DemandBytes: 100 << 20, CgroupUsageBytes: 90 << 20,
		ConsumerStallPercent: 40, // consumer 0's; consumer 2 has no rate yet
	}
	if row != want {
		t.Errorf("samples row\n got %+v\nwant %+v", row, want)
	}
	wantProcs := []store.ProcessRow{
		{ElapsedSeconds: 12.5, Consumer: 0, PID: 101, Comm: "consumer-00", DemandBytes: 100 << 20,
			ResidentBytes: 60 << 20, SwapBytes: 40 << 20, WorkingSetBytes: 70 << 20, MajorFaultsPerSecond: 250, StallPercent: 40},
		// Started after the reading: no demand yet; first seen: no rates,
		// no working set.
		{ElapsedSeconds: 12.5, Consumer: 2, PID: 103, Comm: "consumer-02", DemandBytes: 0,
			ResidentBytes: 60 << 20, SwapBytes: 40 << 20, WorkingSetBytes: -1, MajorFaultsPerSecond: -1, StallPercent: -1},
	}
	if len(procs) != len(wantProcs) {
		t.Fatalf("%d process rows, want %d (live consumers only): %+v", len(procs), len(wantProcs), procs)
	}
	for i := range wantProcs {
		if procs[i] != wantProcs[i] {
			t.Errorf("process row %d\n got %+v\nwant %+v", i, procs[i], wantProcs[i])
		}
	}
}

// Without the stall probe the consumers' stall is unknown, not 0; an
// unreadable cgroup usage is 0, as samples.csv has always had it.
func TestRowsWithoutStallOrUsage(t *testing.T) {
	tick, st := rowsFixture()
	for i := range tick.Reading.Processes {
		tick.Reading.Processes[i].HasStall = false
		tick.Reading.Processes[i].Rates.HasStall = false
	}
	st.CgroupUsageBytes = -1
	tick.Verdict = nil
	row, procs := rowsOf(tick, st)
	if row.ConsumerStallPercent != -1 || row.CgroupUsageBytes != 0 {
		t.Errorf("stall %v, usage %d; want -1 and 0", row.ConsumerStallPercent, row.CgroupUsageBytes)
	}
	if procs[0].StallPercent != -1 || procs[0].WorkingSetBytes != -1 {
		t.Errorf("consumer 0 without probe or indicators: %+v", procs[0])
	}
}

// The fill preset's one consumer demands what it has filled so far.
func TestRowsFillDemand(t *testing.T) {
	tick, st := rowsFixture()
	st.Record.Spec.Preset = run.PresetFill
	st.Progress.DemandBytes = 384 << 20
	_, procs := rowsOf(tick, st)
	if procs[0].DemandBytes != 384<<20 {
		t.Errorf("fill consumer demand %d, want the progress's %d", procs[0].DemandBytes, 384<<20)
	}
}

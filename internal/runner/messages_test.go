package runner

import (
	"math"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/consumer"
	"github.com/thrashscope/thrashscope/internal/run"
)

// What each message adds to a consumer's record, for a timed run, a run
// of fixed work (slowdown against the consumer alone) and the fill preset.
func TestApplyMessage(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	timed := run.Resolved{Preset: "e4"}
	work := run.Resolved{Preset: "syn8", Cycles: 100}
	fill := run.Resolved{Preset: run.PresetFill}
	alone := &run.AloneRecord{RunSeconds: 4}
	started := func(s float64) run.ConsumerRecord {
		st := at(s)
		return run.ConsumerRecord{ActualStart: &st, PlannedEnd: at(20), Cycles: 7}
	}
	for _, c := range []struct {
		name        string
		spec        run.Resolved
		alone       *run.AloneRecord
		before      run.ConsumerRecord
		msg         consumer.Message
		wantChanged bool
		check       func(run.ConsumerRecord) bool
	}{
		{"started", timed, nil, run.ConsumerRecord{}, consumer.StartedMessage(at(3), time.Time{}), true,
			func(c run.ConsumerRecord) bool { return c.ActualStart != nil && c.ActualStart.Equal(at(3)) }},
		{"a cycle counts, no save", timed, nil, started(3), consumer.CycleMessage(10, time.Second), false,
			func(c run.ConsumerRecord) bool { return c.Cycles == 8 }},
		{"done on time", timed, nil, started(3), consumer.DoneMessage(at(19), 50, false), true,
			func(c run.ConsumerRecord) bool {
				return c.ActualEnd.Equal(at(19)) && c.Cycles == 50 && c.LatenessSeconds == 0 && c.RunSeconds == 0
			}},
		{"done late", timed, nil, started(3), consumer.DoneMessage(at(22.5), 50, false), true,
			func(c run.ConsumerRecord) bool { return c.LatenessSeconds == 2.5 }},
		{"fixed work: run time and slowdown", work, alone, started(3), consumer.DoneMessage(at(13), 100, false), true,
			func(c run.ConsumerRecord) bool { return c.RunSeconds == 10 && c.Slowdown == 2.5 }},
		{"fixed work stopped by a signal: no slowdown", work, alone, started(3), consumer.DoneMessage(at(13), 40, true), true,
			func(c run.ConsumerRecord) bool { return c.RunSeconds == 10 && c.Slowdown == 0 }},
		{"fixed work, the one alone not measured: no slowdown", work, nil, started(3), consumer.DoneMessage(at(13), 100, false), true,
			func(c run.ConsumerRecord) bool { return c.RunSeconds == 10 && c.Slowdown == 0 }},
		{"fill: never late", fill, nil, started(3), consumer.DoneMessage(at(99), 12, false), true,
			func(c run.ConsumerRecord) bool { return c.LatenessSeconds == 0 && c.Cycles == 12 }},
		{"a chunk is the execution's", fill, nil, started(3), consumer.ChunkMessage(0, 1, time.Second), false,
			func(c run.ConsumerRecord) bool { return c.Cycles == 7 }},
	} {
		rec := c.before
		changed := applyMessage(&rec, c.msg, c.spec.Traits(), c.alone)
		if changed != c.wantChanged || !c.check(rec) {
			t.Errorf("%s: changed %v (want %v), record %+v", c.name, changed, c.wantChanged, rec)
		}
	}
}

// The slowest cycle is of the current second and the one before: a third
// second forgets the first, and a gap forgets both.
func TestSlowestCycle(t *testing.T) {
	t0 := time.Unix(2_000_000, 0)
	sec := func(s, ms int) time.Time {
		return t0.Add(time.Duration(s)*time.Second + time.Duration(ms)*time.Millisecond)
	}
	var s cycleStats
	for _, step := range []struct {
		at    time.Time
		cycle time.Duration // 0: only read
		want  time.Duration
	}{
		{sec(0, 100), 300 * time.Millisecond, 300 * time.Millisecond},
		{sec(0, 900), 100 * time.Millisecond, 300 * time.Millisecond},
		{sec(1, 200), 200 * time.Millisecond, 300 * time.Millisecond}, // second 0 still counts
		{sec(2, 0), 0, 200 * time.Millisecond},                        // second 0 is gone
		{sec(5, 0), 0, 0},                                             // a gap: both gone
	} {
		if step.cycle > 0 {
			s.cycle(step.at, step.cycle)
		}
		if got := s.slowestCycle(step.at); got != step.want {
			t.Errorf("at %v: slowest %s, want %s", step.at.Sub(t0), got, step.want)
		}
	}
}

// The fill table: per chunk filled at least once, the mean and SD of its
// fill time over the repeats and the host's mean free memory and swap.
func TestFillRows(t *testing.T) {
	if rows := (&cycleStats{}).fillRows(1 << 20); rows != nil {
		t.Errorf("not a fill run: %v, want nil", rows)
	}
	s := cycleStats{chunks: make([][]chunkSample, 3)}
	s.chunk(0, chunkSample{seconds: 1, memFree: 100, swapFree: 10})
	s.chunk(0, chunkSample{seconds: 3, memFree: 300, swapFree: 30})
	s.chunk(2, chunkSample{seconds: 5, memFree: 50, swapFree: 5})
	s.chunk(7, chunkSample{seconds: 9}) // past the plan: dropped
	if s.chunksDone() != 3 {
		t.Errorf("chunks done %d, want 3", s.chunksDone())
	}
	rows := s.fillRows(1 << 20)
	if len(rows) != 2 {
		t.Fatalf("%d rows, want chunks 0 and 2", len(rows))
	}
	r0, r2 := rows[0], rows[1]
	if r0.Chunk != 0 || r0.AllocatedBytes != 1<<20 || r0.Repeats != 2 || r0.MeanSeconds != 2 || math.Abs(r0.SDSeconds-math.Sqrt2) > 1e-9 || r0.MemoryFreeBytes != 200 || r0.SwapFreeBytes != 20 {
		t.Errorf("chunk 0: %+v", r0)
	}
	if r2.Chunk != 2 || r2.AllocatedBytes != 3<<20 || r2.Repeats != 1 || r2.MeanSeconds != 5 {
		t.Errorf("chunk 2: %+v", r2)
	}
}

// A run's progress from its record alone: a timed run's plan, a run of
// fixed work (its consumers planned once the one alone has ended), and the
// fill preset's demand by chunks.
func TestProgressAt(t *testing.T) {
	t0 := time.Unix(3_000_000, 0)
	at := func(s float64) *time.Time { v := t0.Add(time.Duration(s * float64(time.Second))); return &v }
	e4, err := run.Resolve(run.Spec{Preset: "e4"})
	if err != nil {
		t.Fatal(err)
	}
	cs := []run.ConsumerRecord{
		{Index: 0, ActualStart: at(1), ActualEnd: at(9), LatenessSeconds: 1.5, Cycles: 10, PlannedStart: *at(1), PlannedEnd: *at(7.5)},
		{Index: 1, ActualStart: at(2), Cycles: 4, PlannedStart: *at(2), PlannedEnd: *at(8)}, // running past its t_f
		{Index: 2, PlannedStart: *at(30), PlannedEnd: *at(40)},                              // not started
		{Index: 3, ActualStart: at(3), Exit: "killed", PlannedStart: *at(3), PlannedEnd: *at(9)},
	}
	p := progressAt(strategyOf(e4), e4, &run.Record{Consumers: cs}, t0, *at(12), 0)
	if p.Elapsed != 12*time.Second || p.Total != e4.Duration() || p.Planned != e4.ActiveAt(12*time.Second) {
		t.Errorf("timed: elapsed %s total %s planned %d, want the plan's", p.Elapsed, p.Total, p.Planned)
	}
	if p.Started != 3 || p.Active != 1 || p.Ended != 2 || p.DemandBytes != e4.SizeBytes {
		t.Errorf("timed: started %d active %d ended %d demand %d, want 3, 1, 2 and one consumer's size", p.Started, p.Active, p.Ended, p.DemandBytes)
	}
	if want := []float64{1.5, 4, 0, 0}; len(p.LatenessSeconds) != 4 || p.LatenessSeconds[0] != want[0] || p.LatenessSeconds[1] != want[1] || p.LatenessSeconds[2] != 0 {
		t.Errorf("lateness %v, want %v (the running one's so far)", p.LatenessSeconds, want)
	}

	work := e4
	work.Cycles = 100
	rec := run.Record{Consumers: cs}
	if p := progressAt(strategyOf(work), work, &rec, t0, *at(12), 0); p.Total != 0 || p.Planned != 0 {
		t.Errorf("fixed work, the one alone still running: total %s planned %d, want 0 and 0", p.Total, p.Planned)
	}
	rec.Alone = &run.AloneRecord{Exit: "ok"}
	if p := progressAt(strategyOf(work), work, &rec, t0, *at(12), 0); p.Planned != 1 {
		t.Errorf("fixed work after the one alone: planned %d, want 1 (consumer 1; 2 is not due, 0 and 3 ended)", p.Planned)
	}

	fill, err := run.Resolve(run.Spec{Preset: run.PresetFill})
	if err != nil {
		t.Fatal(err)
	}
	p = progressAt(strategyOf(fill), fill, &run.Record{Consumers: cs[1:2]}, t0, *at(12), fill.Consumers+2)
	if p.ChunksDone != fill.Consumers+2 || p.Planned != 1 || p.DemandBytes != 2*fill.SizeBytes {
		t.Errorf("fill: chunks %d planned %d demand %d, want %d, 1 and two chunks (the second repeat's)", p.ChunksDone, p.Planned, p.DemandBytes, fill.Consumers+2)
	}
}

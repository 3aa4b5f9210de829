package analysis

import (
	"math"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
)

func TestConsumersOf(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	start, end := at(10), at(40)
	rec := run.Record{StartedAt: t0, EndedAt: &end, Spec: run.Resolved{Policy: "tpf"},
		Consumers: []run.ConsumerRecord{{Index: 0, ActualStart: &start, Slowdown: 2.5}, {Index: 1, ActualStart: &start}},
		Decisions: []run.Decision{
			{At: at(12), Kind: "protect", Consumer: 1},
			{At: at(15), Kind: "release", Consumer: 1},
			{At: at(20), Kind: "protect", Consumer: 0, Error: "refused"},
			{At: at(30), Kind: "protect", Consumer: 1}, // held to the end
		}}
	rows := []store.ProcessRow{
		{ElapsedSeconds: 11, Consumer: 0, MajorFaultsPerSecond: store.Unknown},
		{ElapsedSeconds: 11, Consumer: 1, MajorFaultsPerSecond: 100}, // 1 s since its start
		{ElapsedSeconds: 13, Consumer: 0, MajorFaultsPerSecond: 50},  // 2 s
		{ElapsedSeconds: 13, Consumer: 1, MajorFaultsPerSecond: 10},  // 2 s
	}
	got := consumersOf(Recorded{Record: rec, Processes: rows})
	if len(got) != 2 || got[0].MajorFaults != 100 || got[1].MajorFaults != 120 {
		t.Errorf("%+v: want 100 and 120 major faults", got)
	}
	if got[0].HeldSeconds != 0 || got[1].HeldSeconds != 13 {
		t.Errorf("%+v: want consumer 0 never held (its protection failed), consumer 1 for 3 + 10 s", got)
	}
	if got[0].Slowdown != 2.5 || !math.IsNaN(got[1].Slowdown) {
		t.Errorf("%+v: want slowdowns 2.5 and NaN", got)
	}
}

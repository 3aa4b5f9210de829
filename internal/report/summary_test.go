package report

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/analysis"
	"github.com/thrashscope/thrashscope/internal/row"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
)

// Runs of one preset at several scales are summarised per scale, with the
// peak per MiB of limit that a scale keeping the physics leaves alike.
func TestSummaryGroupsScales(t *testing.T) {
	var runs []analysis.Recorded
	var sums []analysis.Summary
	for i, scale := range []float64{0.1, 0.5, 0.1} {
		spec, err := run.Resolve(run.Spec{Preset: "e4", Scale: &scale})
		if err != nil {
			t.Fatal(err)
		}
		rec := run.Record{ID: fmt.Sprintf("r%d", i), Spec: spec, State: run.StateCompleted}
		rows := []store.Row{{ElapsedSeconds: 1, Host: row.Host{SwapInPagesPerSecond: 100 * float64(spec.MemoryLimitBytes) / mib}}}
		runs = append(runs, analysis.Recorded{Record: rec, Samples: rows})
		sums = append(sums, analysis.Summarise(rec, rows))
	}
	text := SummaryText(runs, sums)
	for _, want := range []string{"at scale 0.1: across 2 runs", "at scale 0.5: across 1 runs", "peak swap-in per MiB of limit 100.00 ± 0.00 pages/s (n=3)"} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q:\n%s", want, text)
		}
	}
	if fig := stabilityFigure(runs); !strings.HasPrefix(fig.title, "Scales compared") || fig.rows[0][0].YLabel != "pages/s per MiB" {
		t.Errorf("figure of three scales: %q, %q", fig.title, fig.rows[0][0].YLabel)
	}
}

func TestHeldSteps(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	rec := run.Record{StartedAt: t0, Spec: run.Resolved{Policy: "tpf", SizeBytes: 100 * mib},
		Decisions: []run.Decision{
			{At: at(10), Kind: "protect", Consumer: 1},
			{At: at(12), Kind: "protect", Consumer: 0, Error: "refused"},
			{At: at(20), Kind: "release", Consumer: 1},
		}}
	x, y, name := heldSteps(rec, 1, 30)
	if name != "protected (tpf)" || !slices.Equal(x, []float64{0, 10, 10, 20, 20, 30}) || !slices.Equal(y, []float64{0, 0, 110, 110, 0, 0}) {
		t.Errorf("consumer 1: %v %v %q, want a step up to 110 MiB from 10 s to 20 s", x, y, name)
	}
	if x, _, _ := heldSteps(rec, 0, 30); x != nil {
		t.Errorf("consumer 0, whose only decision failed: %v, want no steps", x)
	}
}

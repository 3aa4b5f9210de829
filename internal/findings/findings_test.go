package findings

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/analysis"
	"github.com/thrashscope/thrashscope/internal/row"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
	"github.com/thrashscope/thrashscope/internal/swapdev"
)

// shape is a synthetic swap-in curve: 0 until rise, up linearly to peak at
// top, down linearly to 0 at fall.
type shape struct{ rise, top, fall, peak float64 }

func (s shape) at(t float64) float64 {
	switch {
	case t <= s.rise || t >= s.fall:
		return 0
	case t <= s.top:
		return s.peak * (t - s.rise) / (s.top - s.rise)
	}
	return s.peak * (s.fall - t) / (s.fall - s.top)
}

// synthetic is a completed run of preset at scale 1 whose swap-ins follow s,
// times (1 + wobble·sin) to tell repeats apart.
func synthetic(t *testing.T, preset string, s shape, wobble float64) analysis.Recorded {
	t.Helper()
	spec, err := run.Resolve(run.Spec{Preset: preset})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	end := start.Add(spec.Duration())
	rec := run.Record{ID: preset, Spec: spec, State: run.StateCompleted, StartedAt: start, EndedAt: &end}
	for i := range spec.Consumers {
		rec.Consumers = append(rec.Consumers, run.ConsumerRecord{Index: i, Exit: "exited"})
	}
	var rows []store.Row
	for k := 0; k <= int(spec.Duration().Seconds()); k++ {
		x := float64(k)
		rows = append(rows, store.Row{Host: row.Host{SwapInPagesPerSecond: s.at(x) * (1 + wobble*math.Sin(x/7))}, ElapsedSeconds: x})
	}
	return analysis.Recorded{Record: rec, Samples: rows}
}

// paperLike is a reproduction shaped as the paper describes it.
func paperLike(t *testing.T) Runs {
	return Runs{
		"e1": {synthetic(t, "e1", shape{380, 760, 1320, 2_000}, 0)},
		"e2": {synthetic(t, "e2", shape{380, 760, 1320, 8_000}, 0)},
		"e3": {synthetic(t, "e3", shape{740, 760, 1000, 3_000}, 0)},
		"e4": {synthetic(t, "e4", shape{20, 35, 50, 9_000}, 0)},
		"fig12": {
			synthetic(t, "fig12", shape{130, 260, 420, 8_000}, 0.05),
			synthetic(t, "fig12", shape{130, 260, 420, 8_000}, -0.05),
			synthetic(t, "fig12", shape{135, 260, 420, 8_000}, 0.02),
		},
	}
}

func holds(t *testing.T, runs Runs) map[string]Finding {
	t.Helper()
	fs, err := Check(runs)
	if err != nil {
		t.Fatal(err)
	}
	byClaim := map[string]Finding{}
	for _, f := range fs {
		byClaim[f.Claim] = f
	}
	return byClaim
}

func TestFindingsHoldOnPaperShapedRuns(t *testing.T) {
	fs, err := Check(paperLike(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 7 {
		t.Errorf("%d findings, want 7", len(fs))
	}
	for _, f := range fs {
		if !f.Holds {
			t.Errorf("%s: %s does not hold (%s)", f.Claim, f.Measured, f.Rule)
		}
	}
	cols := []Column{{Device: swapdev.None, Runs: paperLike(t)}}
	rows, err := CheckColumns(cols)
	if err != nil {
		t.Fatal(err)
	}
	table := Table(cols, rows)
	if !strings.HasPrefix(table, "| finding | the paper | rule | thrashscope, this host's swap | holds |\n") || strings.Count(table, "\n") != 9 {
		t.Errorf("table:\n%s", table)
	}
}

// onDevice is runs made on a swap device profile.
func onDevice(t *testing.T, runs Runs, profile string) Runs {
	t.Helper()
	dev, err := swapdev.Named(profile)
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range runs {
		for i := range rs {
			rs[i].Record.Spec.SwapDevice = dev
		}
	}
	return runs
}

// A device's column judges the findings whose runs were made on it and says
// "not run" of the others; a run kept under a device it was not made on is
// refused, either way round.
func TestADeviceColumnJudgesWhatRanOnIt(t *testing.T) {
	hdd := onDevice(t, Runs{"e2": paperLike(t)["e2"]}, swapdev.HDD2013)
	cols := []Column{{Device: swapdev.None, Runs: paperLike(t)}, {Device: swapdev.HDD2013, Runs: hdd}}
	rows, err := CheckColumns(cols)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if len(r.Cells) != 2 {
			t.Fatalf("%s: %d cells, want 2", r.Claim, len(r.Cells))
		}
		own, dev := r.Cells[0], r.Cells[1]
		if own.NotRun || !own.Holds {
			t.Errorf("%s on the host's swap: %+v", r.Claim, own)
		}
		if wantRun := r.Claim == "e2 thrashes in a window"; dev.NotRun == wantRun || (wantRun && (!dev.Holds || dev.Measured != own.Measured)) {
			t.Errorf("%s on hdd-2013 with e2 alone: %+v", r.Claim, dev)
		}
	}
	table := Table(cols, rows)
	if !strings.Contains(table, "| thrashscope, `hdd-2013` | holds |\n|---|---|---|---|---|---|---|\n") || !strings.Contains(table, "| not run | - |") {
		t.Errorf("table:\n%s", table)
	}

	wrong := []Column{{Device: swapdev.None, Runs: paperLike(t)}, {Device: swapdev.HDD2013, Runs: Runs{"e2": paperLike(t)["e2"]}}}
	if _, err := CheckColumns(wrong); err == nil || !strings.Contains(err.Error(), "was made on swap device none, not hdd-2013") {
		t.Errorf("a run on the host's swap kept under hdd-2013: %v", err)
	}
	mixed := paperLike(t)
	mixed["e3"] = onDevice(t, Runs{"e3": mixed["e3"]}, swapdev.HDD2013)["e3"]
	if _, err := CheckColumns([]Column{{Device: swapdev.None, Runs: mixed}}); err == nil || !strings.Contains(err.Error(), "was made on swap device hdd-2013 (120 read I/Os, 120 write I/Os a second), not none") {
		t.Errorf("a run on hdd-2013 kept with the host's: %v", err)
	}
}

// Each finding fails when the run it reads is replaced by one that does not
// show it.
func TestAFindingFailsWhenItsRunDoesNotShowIt(t *testing.T) {
	cases := []struct {
		claim  string
		change func(Runs)
	}{
		{"e2 thrashes in a window", func(r Runs) { r["e2"][0] = synthetic(t, "e2", shape{150, 760, 1320, 8_000}, 0) }},
		{"e2 thrashes in a window", func(r Runs) { r["e2"][0] = synthetic(t, "e2", shape{380, 760, 1500, 8_000}, 0) }},
		{"e1-e3 peak while every consumer is active", func(r Runs) { r["e1"][0] = synthetic(t, "e1", shape{380, 560, 1320, 2_000}, 0) }},
		{"more W, more paging (e1 < e2)", func(r Runs) { r["e1"][0] = synthetic(t, "e1", shape{380, 760, 1320, 9_000}, 0) }},
		{"a longer t_s relieves it (e3 < e2), e3 starts late", func(r Runs) { r["e3"][0] = synthetic(t, "e3", shape{740, 760, 1000, 20_000}, 0) }},
		{"a longer t_s relieves it (e3 < e2), e3 starts late", func(r Runs) { r["e3"][0] = synthetic(t, "e3", shape{380, 760, 1000, 3_000}, 0) }},
		{"t_c = 1 s: a shorter, sharper thrash (e4)", func(r Runs) { r["e4"][0] = synthetic(t, "e4", shape{5, 59, 61, 9_000}, 0) }},
		{"repeats overlap (Fig 12)", func(r Runs) { r["fig12"][1] = synthetic(t, "fig12", shape{130, 260, 420, 16_000}, 0) }},
		{"Linux recovers fast once demand falls", func(r Runs) { r["e2"][0] = synthetic(t, "e2", shape{380, 760, 1480, 8_000}, 0) }},
	}
	for _, c := range cases {
		runs := paperLike(t)
		c.change(runs)
		f, ok := holds(t, runs)[c.claim]
		if !ok {
			t.Fatalf("no finding %q", c.claim)
		}
		if f.Holds {
			t.Errorf("%s holds on a run that does not show it: %s", c.claim, f.Measured)
		}
	}
}

func TestCheckRefusesRunsThatAreNotThePapers(t *testing.T) {
	cases := []struct {
		want   string
		change func(Runs)
	}{
		{"no e3 run", func(r Runs) { delete(r, "e3") }},
		{"one fig12 run", func(r Runs) { r["fig12"] = r["fig12"][:1] }},
		{"OOM killer", func(r Runs) { r["e2"][0].Record.Consumers[7].Exit = "oom-killed" }},
		{"not completed", func(r Runs) { r["e1"][0].Record.State = run.StateAborted }},
		{"the paper's times do not apply", func(r Runs) { r["e2"][0].Record.Spec.Interval = run.Duration(10 * time.Second) }},
		{"not the paper's", func(r Runs) {
			// W kept at 10,000 for a tenth of the size: the old meaning of scale.
			s := &r["e4"][0].Record.Spec
			s.SizeBytes /= 10
			s.MemoryLimitBytes /= 10
			s.Scale = 0.1
		}},
	}
	for _, c := range cases {
		runs := paperLike(t)
		c.change(runs)
		if _, err := Check(runs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.want, err)
		}
	}
}

func TestNum(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4321: "-4,321", math.NaN(): "-"} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestCommittedReproduction derives the findings from the runs committed in
// docs/reproduction: it fails when one is missing or not the paper's
// experiment (lost a consumer, cut short, another timeline), and when the
// README's table (or docs/reproduction's) is not the one the data gives,
// so a run replaced by one that shows something else changes the table and
// fails here until both say so.
func TestCommittedReproduction(t *testing.T) {
	cols, err := LoadColumns("../../docs/reproduction")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := CheckColumns(cols)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		for i, f := range r.Cells {
			t.Logf("%s on %s: %s (holds: %v)", r.Claim, cols[i].Device, f.Measured, f.Holds)
		}
	}
	runs := cols[0].Runs
	// The shape the compressed test in internal/observer checks: on this
	// machine the thrash follows the planned demand over the limit.
	for _, p := range []string{"e1", "e2", "e3"} {
		if m := analysis.Measure(runs[p][0]).Shape; !FollowsDemand(m) {
			t.Errorf("%s: the swap-in episode %+v does not follow the demand over the limit (%.0f-%.0f s)", p, m.Episode, m.Overload, m.UnderLimit)
		}
	}
	for _, page := range []string{"../../README.md", "../../docs/reproduction/README.md"} {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		if table := Table(cols, rows); !strings.Contains(string(text), table) {
			t.Errorf("%s's findings table is not the one docs/reproduction gives; run bin/observer findings and put this in it:\n%s", page, table)
		}
	}
}

// A reproduction whose table holds a NaN is refused, naming the run, the
// file, the line and the column. The defect: a NaN elapsed_seconds made
// findings print "e2 0 s" and exit 0.
func TestLoadRefusesANonFiniteTable(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(root+"/e4", os.DirFS("../../docs/reproduction/e4")); err != nil {
		t.Fatal(err)
	}
	d, err := store.Open(root + "/e4")
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := d.Records()
	if len(recs) == 0 {
		t.Fatal("docs/reproduction/e4 holds no run")
	}
	id := recs[0].ID
	b, err := d.ReadFile(id, store.SamplesFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	lines[3] = "NaN" + lines[3][strings.IndexByte(lines[3], ','):]
	d.WriteFile(id, store.SamplesFile, []byte(strings.Join(lines, "\n")))
	want := "run " + id + ": samples.csv line 4: elapsed_seconds: NaN is not a finite number"
	if _, err := Load(root); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want an error saying %q", err, want)
	}
}

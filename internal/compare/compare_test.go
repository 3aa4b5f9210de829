package compare

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/analysis"
	"github.com/thrashscope/thrashscope/internal/row"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
	"github.com/thrashscope/thrashscope/internal/swapdev"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

func TestOrderInterleaves(t *testing.T) {
	got := Order([]string{"none", "tpf", "binpack"}, 2)
	if want := []string{"none", "tpf", "binpack", "none", "tpf", "binpack"}; !slices.Equal(got, want) {
		t.Errorf("Order = %v, want %v", got, want)
	}
}

func TestValidate(t *testing.T) {
	pol := "tpf"
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Repeats: 1}, "at least one"},
		{Config{Policies: []string{"none", "lru"}, Repeats: 1}, `"lru"`},
		{Config{Policies: []string{"none", "none"}, Repeats: 1}, "twice"},
		{Config{Policies: []string{"none"}, Repeats: 0}, "--repeats=0"},
		{Config{Policies: []string{"none"}, Repeats: MaxRepeats + 1}, "--repeats"},
		{Config{Policies: []string{"none"}, Repeats: 1, Spec: run.Spec{Policy: &pol}}, "leave it out"},
		{Config{Policies: []string{"none"}, Repeats: 1, Timeout: -time.Second}, "--timeout=-1s"},
		{Config{Policies: []string{"none"}, Repeats: 1, Timeout: run.MaxRunDuration + time.Second}, "the longest a run may last"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error with %q", c.cfg, err, c.want)
		}
	}
}

func recorded(id, pol string, slowdowns []float64, swapRates []float64) analysis.Recorded {
	rec := testenv.Record(id, run.StateCompleted, time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC))
	rec.Spec.Policy, rec.Spec.Consumers, rec.MakespanSeconds = pol, len(slowdowns), 30
	for i, s := range slowdowns {
		rec.Consumers = append(rec.Consumers, run.ConsumerRecord{Index: i, Cycles: 100, Slowdown: s, LatenessSeconds: float64(i)})
	}
	var rows []store.Row
	for i, r := range swapRates {
		rows = append(rows, store.Row{Host: row.Host{SwapInPagesPerSecond: r, MajorFaultsPerSecond: 2 * r, PressureFullPercent: r / 10}, ElapsedSeconds: float64(i + 1)})
	}
	return analysis.Recorded{Record: rec, Samples: rows}
}

// measure is a run's figures as the comparison presents them.
func measure(r analysis.Recorded) Result { return resultOf(r) }

func TestMeasure(t *testing.T) {
	r := measure(recorded("a", "binpack", []float64{2, 4, 0}, []float64{100, 300, 50}))
	if r.Policy != "binpack" || r.SwapIns != 450 || r.MajorFaults != 900 || r.PeakPSIFull != 30 {
		t.Errorf("%+v: want binpack, 450 swap-ins, 900 major faults, peak PSI full 30", r)
	}
	// The consumer without a slowdown (stopped before its work was done)
	// is left out of the slowdowns, not counted as 0.
	if r.MeanSlowdown != 3 || r.WorstSlowdown != 4 || r.MeanLatenessSeconds != 1 || r.Cycles != 300 || r.CyclesPerSwapIn != 300.0/450 {
		t.Errorf("%+v: want slowdowns 3 mean and 4 worst, lateness 1, 300 cycles, 300/450 per swap-in", r)
	}
	work := recorded("w", "none", []float64{2}, []float64{1})
	work.Record.Spec.Cycles = 100
	if m := measure(work); !math.IsNaN(m.MeanLatenessSeconds) {
		t.Errorf("a run of fixed work: lateness %g, want NaN (it has no t_f)", m.MeanLatenessSeconds)
	}
	if old := measure(recorded("b", "", nil, nil)); old.Policy != "none" || !math.IsNaN(old.MeanSlowdown) {
		t.Errorf("a record without a policy or slowdowns: %+v, want none and NaN slowdowns", old)
	}
}

func TestTableAndFigure(t *testing.T) {
	rs := []Result{
		measure(recorded("n1", "none", []float64{2}, []float64{100})),
		measure(recorded("b1", "binpack", []float64{3}, []float64{10})),
		measure(recorded("n2", "none", []float64{4}, []float64{300})),
		measure(recorded("b2", "binpack", []float64{3}, []float64{30})),
	}
	tab := Table(rs)
	for _, want := range []string{
		"| none | 30.0 ± 0.00 | 200.0 ± 141.4 |", // mean ± SD of 100 and 300
		"| binpack | 30.0 ± 0.00 | 20.0 ± 14.1 |",
		"2 (n1, n2) |", "2 (b1, b2) |",
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	if strings.Index(tab, "| none |") > strings.Index(tab, "| binpack |") {
		t.Errorf("rows out of the order the policies ran in:\n%s", tab)
	}
	if strings.Contains(tab, "Swap device") {
		t.Errorf("runs on the host's own swap, but the table names a device:\n%s", tab)
	}
	dir := t.TempDir()
	if err := Write(dir, rs); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"compare.txt", "compare.png", "compare.svg"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// A run aborted past --timeout keeps its work in the table (swap-ins,
// cycles per swap-in), has no makespan, and is named below the table with
// its reason and how much of its work it did.
func TestTableNamesRunsThatDidNotComplete(t *testing.T) {
	done := recorded("n1", "none", []float64{2, 2}, []float64{100})
	done.Record.Spec.Cycles = 100
	cut := recorded("b1", "binpack", []float64{0, 0}, []float64{50})
	// A record written before an aborted run's makespan was left out.
	cut.Record.Spec.Cycles, cut.Record.State, cut.Record.MakespanSeconds = 100, run.StateAborted, 1788.6
	cut.Record.Reason = "still running after the timeout of 20m0s"
	cut.Record.Consumers[0].Cycles, cut.Record.Consumers[1].Cycles = 3, 4
	tab := Table([]Result{measure(done), measure(cut)})
	for _, want := range []string{
		"| binpack | – | 50.0 |", // no makespan; the swap-ins it took
		"- b1 (binpack): aborted, still running after the timeout of 20m0s; 7 of its 200 write cycles done (3.5 %)",
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	if strings.Contains(tab, "n1 (none)") {
		t.Errorf("a completed run is named among the unfinished:\n%s", tab)
	}
}

func TestRedrawComparesTheRunsUnderOut(t *testing.T) {
	dir := t.TempDir()
	d, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, pol := range []string{"none", "binpack", "none"} {
		r := recorded(fmt.Sprintf("20260102-03040%d-abcdef", i), pol, []float64{2}, []float64{100 * float64(i+1)})
		r.Record.StartedAt = time.Date(2026, 1, 2, 3, 4, i, 0, time.UTC)
		if err := d.SaveRecord(r.Record); err != nil {
			t.Fatal(err)
		}
		var tab store.Table
		for _, row := range r.Samples {
			tab.Append(row)
		}
		if err := d.WriteFile(r.Record.ID, store.SamplesFile, tab.CSV()); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := Redraw(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.Policy)
	}
	if want := []string{"none", "binpack", "none"}; !slices.Equal(got, want) || rs[2].SwapIns != 300 {
		t.Errorf("redrawn %v (last swap-ins %g), want %v oldest first, the last with 300", got, rs[2].SwapIns, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "compare.png")); err != nil {
		t.Error(err)
	}
	if _, err := Redraw(t.TempDir()); err == nil {
		t.Error("Redraw of an empty directory: no error")
	}

	// A corrupt record, or one left active, is named and nothing is
	// written: a table without its row would look whole.
	os.Remove(filepath.Join(dir, "compare.txt"))
	bad := filepath.Join(dir, "runs", "20260102-030409-bad000")
	os.MkdirAll(bad, 0o750)
	os.WriteFile(filepath.Join(bad, store.RecordFile), []byte(`{"id":"20260102-030409-bad000","state":"completed"`), 0o600)
	left := testenv.Record("20260102-030408-left00", run.StateRunning, time.Date(2026, 1, 2, 3, 4, 8, 0, time.UTC))
	if err := d.SaveRecord(left); err != nil {
		t.Fatal(err)
	}
	_, err = Redraw(dir)
	for _, want := range []string{"run 20260102-030409-bad000 is corrupt", "run 20260102-030408-left00 is still running", "nothing was written"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Redraw with a corrupt and an active record: %v, want it to say %q", err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "compare.txt")); !os.IsNotExist(err) {
		t.Errorf("compare.txt was written: %v", err)
	}
}

// The defect this guards: `ln -s /some/file X/compare.txt; observer compare
// --redraw --out X` overwrote the target, with lines a crafted record's
// policy chose. The link is replaced, and the crafted record refused.
func TestRedrawWritesThroughNoLinkAndTakesNoCraftedPolicy(t *testing.T) {
	dir := t.TempDir()
	d, _ := store.Open(dir)
	r := recorded("20260102-030400-abcdef", "none", []float64{2}, []float64{100})
	d.SaveRecord(r.Record)
	var tab store.Table
	for _, row := range r.Samples {
		tab.Append(row)
	}
	d.WriteFile(r.Record.ID, store.SamplesFile, tab.CSV())
	victim := filepath.Join(t.TempDir(), "sudoers")
	os.WriteFile(victim, []byte("root ALL=(ALL) ALL\n"), 0o440)
	os.Symlink(victim, filepath.Join(dir, "compare.txt"))
	if _, err := Redraw(dir); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "root ALL=(ALL) ALL\n" {
		t.Errorf("compare wrote through the link: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "compare.txt")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("compare.txt: %v, %v", fi, err)
	}

	crafted := r.Record
	crafted.ID, crafted.Spec.Policy = "20260102-030401-abcdef", "none\nALL ALL=(ALL) NOPASSWD: ALL"
	b, _ := json.Marshal(crafted)
	d.WriteFile(crafted.ID, store.RecordFile, b)
	d.WriteFile(crafted.ID, store.SamplesFile, tab.CSV())
	_, err := Redraw(dir)
	if err == nil || !strings.Contains(err.Error(), "run 20260102-030401-abcdef is corrupt") || !strings.Contains(err.Error(), "spec.policy") {
		t.Errorf("a record whose policy holds a line of its own: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "compare.txt")); strings.Contains(string(b), "NOPASSWD") {
		t.Errorf("the crafted policy reached compare.txt:\n%s", b)
	}
}

// A comparison on an emulated swap device says so above its table, with
// what was emulated; runs made on different devices are each named.
func TestTableNamesTheSwapDevice(t *testing.T) {
	hdd, err := swapdev.Named(swapdev.HDD2013)
	if err != nil {
		t.Fatal(err)
	}
	var rs []Result
	for _, id := range []string{"n1", "b1"} {
		r := recorded(id, "none", []float64{2}, []float64{100})
		r.Record.Spec.SwapDevice = hdd
		r.Record.SwapEmulation = &swapdev.Emulation{Devices: []swapdev.Device{{Number: "254:0", Swap: "/var/swap"}}, Cgroup: "/sys/fs/cgroup/blkio/thrashscope-run-" + id, Controller: "blkio", Throttled: []string{swapdev.Reads}, Note: swapdev.NoteV1Writes}
		rs = append(rs, measure(r))
	}
	if d := rs[0].Device; !strings.HasPrefix(d, "hdd-2013 (120 read I/Os, 120 write I/Os a second); ") || !strings.Contains(d, "reads") {
		t.Errorf("the run's device %q: want the profile, then what was throttled", d)
	}
	want := "Swap device: " + rs[0].Device + ".\n\n| policy |"
	if tab := Table(rs); !strings.HasPrefix(tab, want) {
		t.Errorf("table on hdd-2013:\n%s\nwant it to begin %q", tab, want)
	}
	rs = append(rs, measure(recorded("n2", "none", []float64{2}, []float64{100})))
	if tab := Table(rs); !strings.HasPrefix(tab, "Swap device: hdd-2013 (") || !strings.Contains(tab, "; and the host's own swap.\n") {
		t.Errorf("table over two devices:\n%s", tab)
	}
	if err := Write(t.TempDir(), rs); err != nil {
		t.Fatal(err)
	}
}

// Directions keep a finding only past both the runs' spread and a fifth
// of the mean, for measures every run of both policies has; Keeps names a
// finding another set of runs turns around, shrinks or grows out of its
// committed pairs' interval, or cannot show.
func TestDirections(t *testing.T) {
	res := func(pol string, makespan, swapIns float64) Result {
		nan := math.NaN()
		return Result{Totals: analysis.Totals{Policy: pol, MakespanSeconds: makespan, SwapIns: swapIns, MajorFaults: swapIns,
			MeanSlowdown: nan, WorstSlowdown: nan, MeanLatenessSeconds: nan, CyclesPerSwapIn: nan}}
	}
	committed := []Result{
		res("none", 20, 212_000), res("binpack", 40, 46_000), res("binpack", 39, 56_000), res("none", 21, 215_000),
		// tpf: its makespan apart from none's by more than a fifth but
		// within twice the spread; no swap-ins for one run.
		res("tpf", 10, nan()), res("tpf", 30, 200_000),
	}
	var got []string
	for _, d := range Directions(committed) {
		got = append(got, d.String())
	}
	want := []string{
		"makespan higher under binpack than under none (×1.93, one pair of runs ×1.86 to ×2.00)",
		"swap-ins lower under binpack than under none (×0.24, one pair of runs ×0.21 to ×0.26)",
		"major faults lower under binpack than under none (×0.24, one pair of runs ×0.21 to ×0.26)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Directions:\n%q\nwant\n%q", got, want)
	}
	ds := Directions(committed)
	// Other sizes within the pairs' interval, widened by half toward no
	// difference and twice away from it (×1.24 to ×4.00, ×0.11 to ×0.40),
	// hold.
	if p := Keeps(ds, []Result{res("none", 25, 300_000), res("binpack", 60, 95_000)}); len(p) != 0 {
		t.Errorf("the same findings, other sizes within their interval: %q, want none named", p)
	}
	if p := Keeps(ds, []Result{res("none", 25, 300_000), res("binpack", 95, 36_000)}); len(p) != 0 {
		t.Errorf("the same findings, stronger within twice their far side: %q, want none named", p)
	}
	if p := Keeps(ds, []Result{res("none", 25, 300_000), res("binpack", 110, 30_000)}); len(p) != 3 || !strings.Contains(p[0], "×4.40 here, outside ×1.24 to ×4.00") {
		t.Errorf("every finding grown past twice its far side: %q", p)
	}
	// A finding whose pairs spread wide (×0.05 to ×0.58, a peak PSI full
	// near zero under one policy) is widened away from no difference by
	// that spread, not by twice alone; toward it, by half as ever.
	wide := []Direction{{Metric: "swap-ins", A: "none", B: "binpack", Lower: true, Lo: 0.05, Hi: 0.58}}
	if p := Keeps(wide, []Result{res("none", 25, 300_000), res("binpack", 60, 6_000)}); len(p) != 0 {
		t.Errorf("×0.02, within its pairs' own spread past their far side: %q, want none named", p)
	}
	if p := Keeps(wide, []Result{res("none", 25, 300_000), res("binpack", 60, 1_200)}); len(p) != 1 || !strings.Contains(p[0], "×0.00 here, outside ×0.00 to ×0.87") {
		t.Errorf("×0.004, past its pairs' spread beyond their far side: %q", p)
	}
	if p := Keeps(wide, []Result{res("none", 25, 300_000), res("binpack", 60, 270_000)}); len(p) != 1 || !strings.Contains(p[0], "outside ×0.00 to ×0.87") {
		t.Errorf("×0.90, shrunk past half toward no difference: %q", p)
	}
	// The same signs, shrunk: a finding that no longer says what the docs say.
	p := Keeps(ds, []Result{res("none", 25, 300_000), res("binpack", 26, 290_000)})
	if len(p) != 3 || !strings.Contains(p[0], "×1.04 here, outside ×1.24 to ×4.00") || !strings.Contains(p[1], "×0.97 here, outside ×0.11 to ×0.40") {
		t.Errorf("every finding shrunk to nothing: %q", p)
	}
	p = Keeps(ds, []Result{res("none", 25, 100_000), res("binpack", 24, 120_000)})
	if len(p) != 3 || !strings.Contains(p[0], "makespan higher under binpack than under none (×1.93, one pair of runs ×1.86 to ×2.00): turned around, ×0.96 here") {
		t.Errorf("every direction turned around: %q", p)
	}
	if p := Keeps(ds, []Result{res("none", 25, 100_000)}); len(p) != 3 || !strings.Contains(p[0], "no makespan for none or binpack") {
		t.Errorf("binpack missing: %q", p)
	}
}

func nan() float64 { return math.NaN() }

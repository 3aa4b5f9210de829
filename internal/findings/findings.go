// Package findings checks the observations of Maziero et al. (2013) against
// runs thrashscope recorded: each observation's figure in the paper beside
// the one measured, the rule that judges it, and whether the data shows it.
// The repository keeps a reproduction in docs/reproduction, one data
// directory per preset, made on the host's own swap, and beside it, under
// docs/reproduction/<profile>, the runs made on an emulated swap device
// (hdd-2013: the papers' disk); `observer findings` prints the table the
// README carries, a column per device, and a test derives it from those
// committed runs.
package findings

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/thrashscope/thrashscope/internal/analysis"
	"github.com/thrashscope/thrashscope/internal/report"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/stats"
	"github.com/thrashscope/thrashscope/internal/store"
	"github.com/thrashscope/thrashscope/internal/swapdev"
)

// Runs are the runs of a reproduction by preset, each preset's in the order
// they started.
type Runs map[string][]analysis.Recorded

// Finding is one observation of the paper, checked.
type Finding struct {
	Claim    string // the observation, in short
	Paper    string // the paper's figure
	Measured string // thrashscope's
	Rule     string // how the data is judged, fixed before the runs
	Holds    bool
	// NotRun: the runs the finding reads were not made on this device.
	NotRun bool
}

// Column is one swap device's reproduction: the runs made on the host's own
// swap (swapdev.None), or on an emulated device (a profile's name).
type Column struct {
	Device string
	Runs   Runs
}

// Row is one observation of the paper, checked on each device.
type Row struct {
	Claim, Paper, Rule string
	Cells              []Finding // one per column, in the columns' order
}

// The presets the findings need.
var needed = []string{"e1", "e2", "e3", "e4", "fig12"}

// Tolerances, set from the paper's own precision before any run was made:
// its times are read off smoothed curves ("about 400 s"), so a time holds
// within tolerance of the paper's; a peak holds within one t_c of the
// plateau, the time one consumer more or less makes.
const (
	timeTolerance   = 100.0 // s, for "about 400 s" and the like
	spreadLimit     = 0.25  // the fig12 runs' SD across runs over their mean
	recoveryIntervs = 4     // recovery within this many t_c of demand falling under the limit
)

// Load reads a reproduction: every directory under root named after a preset
// is a data directory (runs/<id>/record.json, samples.csv, processes.csv,
// the tables gzipped or not).
func Load(root string) (Runs, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("reading the reproduction %s: %w; give the directory that holds e1/, e2/, e3/, e4/ and fig12/ (docs/reproduction in the repository)", root, err)
	}
	runs := Runs{}
	for _, e := range entries {
		if !e.IsDir() || !slices.Contains(run.PresetNames(), e.Name()) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		d, err := store.OpenExisting(dir)
		if err != nil {
			return nil, err
		}
		recs, err := d.Records()
		if err != nil {
			return nil, err
		}
		var ids []string
		for _, r := range slices.Backward(recs) { // Records lists newest first
			ids = append(ids, r.ID)
		}
		if len(ids) == 0 {
			continue
		}
		rs, err := report.Load(dir, ids)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			if r.Record.Spec.Preset != e.Name() {
				return nil, fmt.Errorf("%s holds run %s of preset %s: keep each preset's runs in its own directory", dir, r.Record.ID, r.Record.Spec.Preset)
			}
		}
		runs[e.Name()] = rs
	}
	return runs, nil
}

// LoadColumns reads a reproduction on every device it was made on: root's
// presets on the host's own swap, and <root>/<profile>/'s for each swap
// device profile that has runs there, in the profiles' order.
func LoadColumns(root string) ([]Column, error) {
	own, err := Load(root)
	if err != nil {
		return nil, err
	}
	cols := []Column{{Device: swapdev.None, Runs: own}}
	for _, name := range swapdev.Names() {
		if name == swapdev.None {
			continue
		}
		dir := filepath.Join(root, name)
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		runs, err := Load(dir)
		if err != nil {
			return nil, err
		}
		if len(runs) > 0 {
			cols = append(cols, Column{Device: name, Runs: runs})
		}
	}
	return cols, nil
}

// Check derives every finding from the runs. It refuses runs that are not
// the paper's experiment: a missing preset, a timeline other than the
// preset's, a fraction of pages touched per cycle other than the paper's,
// a run that did not complete, or one that lost a consumer to the OOM killer.
func Check(runs Runs) ([]Finding, error) {
	for _, p := range needed {
		if len(runs[p]) == 0 {
			return nil, fmt.Errorf("no %s run: the findings need %s; run each at its paper timing", p, strings.Join(needed, ", "))
		}
	}
	if len(runs["fig12"]) < 2 {
		return nil, errors.New("one fig12 run: the stability finding compares repeats; run fig12 three times as the paper did")
	}
	return check(runs, swapdev.None)
}

// CheckColumns derives every finding on every device: the first column, the
// host's own swap, must hold every preset (as Check); on an emulated device
// a finding whose runs were not made there is NotRun. A run kept under a
// device it was not made on is refused, as Check refuses runs that are not
// the paper's.
func CheckColumns(cols []Column) ([]Row, error) {
	if len(cols) == 0 || cols[0].Device != swapdev.None {
		return nil, errors.New("no reproduction on the host's own swap: its runs are the first column")
	}
	rows := make([]Row, len(rules))
	for i, r := range rules {
		rows[i] = Row{Claim: r.claim, Paper: r.paper, Rule: r.rule}
	}
	for i, c := range cols {
		var fs []Finding
		var err error
		if i == 0 {
			fs, err = Check(c.Runs)
		} else {
			fs, err = check(c.Runs, c.Device)
		}
		if err != nil {
			return nil, err
		}
		for k := range rows {
			rows[k].Cells = append(rows[k].Cells, fs[k])
		}
	}
	return rows, nil
}

// devices refuses a run kept in a column other than its device's.
func devices(c Column) error {
	want, err := swapdev.Named(c.Device)
	if err != nil {
		return err
	}
	for _, rs := range c.Runs {
		for _, r := range rs {
			got := r.Record.Spec.SwapDevice
			if got.IsNone() && want.IsNone() {
				continue
			}
			if got != want {
				return fmt.Errorf("run %s (%s) was made on swap device %s, not %s: keep it under its device's directory (docs/reproduction/<profile>/<preset>, the host's own swap at the top)", r.Record.ID, r.Record.Spec.Preset, got, c.Device)
			}
		}
	}
	return nil
}

// check judges every rule whose runs are there; the others are NotRun.
func check(runs Runs, device string) ([]Finding, error) {
	if err := devices(Column{Device: device, Runs: runs}); err != nil {
		return nil, err
	}
	for _, p := range needed {
		for _, r := range runs[p] {
			if err := paperRun(r); err != nil {
				return nil, err
			}
		}
	}
	d := reproduction{runs: runs, figs: map[string]analysis.Figures{}}
	for _, p := range []string{"e1", "e2", "e3", "e4"} {
		if len(runs[p]) > 0 {
			d.figs[p] = analysis.Measure(runs[p][0])
		}
	}
	out := make([]Finding, 0, len(rules))
	for _, r := range rules {
		f := Finding{Claim: r.claim, Paper: r.paper, Rule: r.rule}
		if r.ran(runs) {
			f.Measured, f.Holds = r.judge(d)
		} else {
			f.NotRun, f.Measured = true, "not run"
		}
		out = append(out, f)
	}
	return out, nil
}

// reproduction is what the rules judge: the runs, and the first run of
// each of e1-e4 there is as a series.
type reproduction struct {
	runs Runs
	figs map[string]analysis.Figures
}

func (d reproduction) e1() analysis.Figures { return d.figs["e1"] }
func (d reproduction) e2() analysis.Figures { return d.figs["e2"] }
func (d reproduction) e3() analysis.Figures { return d.figs["e3"] }
func (d reproduction) e4() analysis.Figures { return d.figs["e4"] }

// A finding's rule: the paper's claim and what the paper shows, the test
// fixed before the runs, the presets it reads (fig12 in at least two runs),
// and the judge that measures the runs and applies it.
type findingRule struct {
	claim, paper, rule string
	needs              []string
	judge              func(d reproduction) (measured string, holds bool)
}

// ran says whether the runs the rule reads are there.
func (r findingRule) ran(runs Runs) bool {
	for _, p := range r.needs {
		if len(runs[p]) == 0 || (p == "fig12" && len(runs[p]) < 2) {
			return false
		}
	}
	return true
}

// rules are the paper's findings, in the order of the README's table.
var rules = []findingRule{
	{
		claim: "e2 thrashes in a window", paper: "about 400 s to about 1300 s",
		needs: []string{"e2"},
		rule:  fmt.Sprintf("onset and recovery of the swap-in episode each within %.0f s of the paper's", timeTolerance),
		judge: func(d reproduction) (string, bool) {
			ep := d.e2().Summary.SwapIn
			if ep == nil || !ep.Recovered {
				return episodeText(ep), false
			}
			return fmt.Sprintf("%.0f s to %.0f s", ep.Onset, ep.Recovery),
				math.Abs(ep.Onset-400) <= timeTolerance && math.Abs(ep.Recovery-1300) <= timeTolerance
		},
	},
	{
		claim: "e1-e3 peak while every consumer is active", paper: "[730 s, 790 s]",
		needs: []string{"e1", "e2", "e3"},
		rule:  "the peak of swap-ins/s, averaged over ±t_c, within t_c of the plateau",
		judge: func(d reproduction) (string, bool) {
			holds := true
			var peaks []string
			for _, f := range []analysis.Figures{d.e1(), d.e2(), d.e3()} {
				peaks = append(peaks, fmt.Sprintf("%s %.0f s", f.Summary.Preset, f.Shape.PeakAt))
				holds = holds && PeaksOnPlateau(f.Shape)
			}
			return strings.Join(peaks, ", "), holds
		},
	},
	{
		claim: "more W, more paging (e1 < e2)", paper: "e1's paging below e2's",
		needs: []string{"e1", "e2"},
		rule:  "mean swap-ins/s over the plateau, e1 below e2",
		judge: func(d reproduction) (string, bool) {
			return fmt.Sprintf("e1 %s, e2 %s swap-ins/s (peak PSI memory full: e1 %.0f %%, e2 %.0f %%)", num(d.e1().Shape.PlateauMean), num(d.e2().Shape.PlateauMean), d.e1().Summary.PeakPSIFull, d.e2().Summary.PeakPSIFull),
				d.e1().Shape.PlateauMean < d.e2().Shape.PlateauMean
		},
	},
	{
		claim: "a longer t_s relieves it (e3 < e2), e3 starts late", paper: "e3's paging below e2's; e3's thrash starts about 750 s",
		needs: []string{"e2", "e3"},
		rule:  fmt.Sprintf("mean swap-ins/s over the plateau, e3 below e2; e3's onset within %.0f s of 750 s", timeTolerance),
		judge: func(d reproduction) (string, bool) {
			e2, e3 := d.e2(), d.e3()
			return fmt.Sprintf("e3 %s, e2 %s swap-ins/s (peak PSI memory full: e3 %.0f %%, e2 %.0f %%); e3 %s",
					num(e3.Shape.PlateauMean), num(e2.Shape.PlateauMean), e3.Summary.PeakPSIFull, e2.Summary.PeakPSIFull, episodeText(e3.Summary.SwapIn)),
				e3.Shape.PlateauMean < e2.Shape.PlateauMean && e3.Summary.SwapIn != nil && math.Abs(e3.Summary.SwapIn.Onset-750) <= timeTolerance
		},
	},
	{
		claim: "t_c = 1 s: a shorter, sharper thrash (e4)", paper: "activity between about 5 s and 40 s of 60 s",
		needs: []string{"e2", "e4"},
		rule:  "e4's episode shorter than e2's, and its rise from onset to the smoothed peak shorter",
		judge: func(d reproduction) (string, bool) {
			d2, r2 := d.e2().Shape.EpisodeSeconds, d.e2().Shape.RiseSeconds
			d4, r4 := d.e4().Shape.EpisodeSeconds, d.e4().Shape.RiseSeconds
			e4 := "e4 " + episodeText(d.e4().Summary.SwapIn)
			if !math.IsNaN(r4) {
				e4 += fmt.Sprintf(" (rise %.0f s)", r4)
			}
			e2 := "e2 " + episodeText(d.e2().Summary.SwapIn)
			if !math.IsNaN(d2) {
				e2 = fmt.Sprintf("e2 lasts %.0f s (rise %.0f s)", d2, r2)
			}
			return e4 + ", " + e2, d4 < d2 && r4 < r2 // false when either is NaN: not recovered
		},
	},
	{
		claim: "repeats overlap (Fig 12)", paper: "three runs (FreeBSD) of W=10,000, t_s=100 ms, t_c=10 s overlap",
		needs: []string{"fig12"},
		rule:  fmt.Sprintf("mean over time of the SD across runs of swap-ins/s (averaged over ±t_c), over the mean over time of their mean, at most %.0f %%", 100*spreadLimit),
		judge: func(d reproduction) (string, bool) {
			spread, n := stability(d.runs["fig12"])
			return fmt.Sprintf("%d runs: SD across runs %.0f %% of their mean", n, 100*spread), spread <= spreadLimit
		},
	},
	{
		claim: "Linux recovers fast once demand falls", paper: "the fastest recovery of the OSes; e2's thrash ends about 1300 s, 90 s after demand falls under the limit",
		needs: []string{"e1", "e2", "e3", "e4"},
		rule:  fmt.Sprintf("from the consumer's end that brings the planned demand under the limit to swap-ins below 10 %% of the peak: at most %d t_c", recoveryIntervs),
		judge: func(d reproduction) (string, bool) {
			holds := true
			var lags []string
			for _, f := range []analysis.Figures{d.e1(), d.e2(), d.e3(), d.e4()} {
				lag := f.Shape.RecoveryLagSeconds
				if math.IsNaN(lag) {
					lags = append(lags, f.Summary.Preset+" not recovered")
					holds = false
					continue
				}
				lags = append(lags, fmt.Sprintf("%s %.0f s", f.Summary.Preset, lag))
				holds = holds && lag <= recoveryIntervs*f.Shape.IntervalSeconds
			}
			return strings.Join(lags, ", "), holds
		},
	},
}

// paperRun refuses a run that is not the paper's experiment.
func paperRun(r analysis.Recorded) error {
	rec := r.Record
	if rec.State != run.StateCompleted {
		return fmt.Errorf("run %s (%s) is %s, not completed: a cut-short run is not the paper's experiment; run it again", rec.ID, rec.Spec.Preset, rec.State)
	}
	for _, c := range rec.Consumers {
		if c.Exit == "oom-killed" {
			return fmt.Errorf("run %s (%s) lost consumer %d to the OOM killer: a run short of demand is not the paper's experiment; see the kernel log and run it again", rec.ID, rec.Spec.Preset, c.Index)
		}
	}
	want, err := run.Resolve(run.Spec{Preset: rec.Spec.Preset, Scale: &rec.Spec.Scale})
	if err != nil {
		return fmt.Errorf("run %s: %w", rec.ID, err)
	}
	got := rec.Spec
	if got.Consumers != want.Consumers || got.Interval != want.Interval || got.Sleep != want.Sleep || got.LeadIn != want.LeadIn {
		return fmt.Errorf("run %s (%s) has N=%d, t_c=%s, t_s=%s, lead-in %s, not the preset's %d, %s, %s, %s: the paper's times do not apply to it",
			rec.ID, got.Preset, got.Consumers, got.Interval, got.Sleep, got.LeadIn, want.Consumers, want.Interval, want.Sleep, want.LeadIn)
	}
	touched := func(s run.Resolved) float64 { return float64(s.WritesPerCycle) / float64(s.SizeBytes/4096) }
	if math.Abs(touched(got)-touched(want)) > 0.01*touched(want) {
		return fmt.Errorf("run %s (%s) touches %.2f %% of a consumer's pages per cycle, not the paper's %.2f %% (W=%d for %d bytes): its paging is not the paper's",
			rec.ID, got.Preset, 100*touched(got), 100*touched(want), got.WritesPerCycle, got.SizeBytes)
	}
	return nil
}

// FollowsDemand says whether a run's shape shows the thrash starts as the planned demand passes
// the limit, in the first half of the ramp from there to the plateau (not
// at the plateau, as the paper's e3), and ends within recoveryIntervs t_c
// of the demand falling back under: the shape of the window and recovery
// findings on this machine. The onset's bound is the ramp's, not a number
// of t_c: on a compressed timeline the lag is the consumers' fill and t_s,
// which do not shrink with t_c.
func FollowsDemand(m analysis.Shape) bool {
	e := m.Episode
	return e != nil && e.Recovered && e.Onset >= m.Overload-1 && e.Onset <= m.Overload+(m.PlateauFrom-m.Overload)/2 &&
		e.Recovery >= m.UnderLimit-2*m.IntervalSeconds && e.Recovery <= m.UnderLimit+recoveryIntervs*m.IntervalSeconds
}

// PeaksOnPlateau says whether a run's peak falls while every consumer is
// active, within one t_c.
func PeaksOnPlateau(m analysis.Shape) bool {
	return m.PeakAt >= m.PlateauFrom-m.IntervalSeconds && m.PeakAt <= m.PlateauTo+m.IntervalSeconds
}

// stability is the fig12 runs' spread: at each second, the SD across runs of
// swap-ins/s averaged over ±t_c; its mean over the run, over the mean of
// the runs' mean. Runs are aligned on whole seconds since their start.
func stability(runs []analysis.Recorded) (spread float64, n int) {
	var series [][]float64
	length := math.MaxInt
	for _, r := range runs {
		elapsed, s := analysis.SmoothedSwapIns(r)
		byS := make([]float64, int(r.Record.Spec.Duration()/time.Second))
		seen := make([]bool, len(byS))
		for i, t := range elapsed {
			k := int(math.Round(t))
			if k >= 0 && k < len(byS) && !seen[k] {
				byS[k], seen[k] = s[i], true
			}
		}
		// A second with no sample (a sample late by a second) takes the
		// one before.
		for k := 1; k < len(byS); k++ {
			if !seen[k] {
				byS[k] = byS[k-1]
			}
		}
		series = append(series, byS)
		length = min(length, len(byS))
	}
	var sdSum, meanSum float64
	for k := range length {
		var xs []float64
		for _, s := range series {
			xs = append(xs, s[k])
		}
		m, sd := stats.MeanSD(xs)
		sdSum += sd
		meanSum += m
	}
	if meanSum == 0 {
		return math.NaN(), len(series)
	}
	return sdSum / meanSum, len(series)
}

func episodeText(ep *analysis.Episode) string {
	switch {
	case ep == nil:
		return "no thrash episode"
	case !ep.Recovered:
		return fmt.Sprintf("from %.0f s, not recovered", ep.Onset)
	}
	return fmt.Sprintf("%.0f s to %.0f s", ep.Onset, ep.Recovery)
}

// num formats a rate with thousands separators.
func num(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Table renders the findings as the README's Markdown table: the paper and
// the rule, then what each device measured and whether it holds.
func Table(cols []Column, rows []Row) string {
	var b strings.Builder
	b.WriteString("| finding | the paper | rule |")
	for _, c := range cols {
		if c.Device == swapdev.None {
			b.WriteString(" thrashscope, this host's swap | holds |")
		} else {
			fmt.Fprintf(&b, " thrashscope, `%s` | holds |", c.Device)
		}
	}
	b.WriteString("\n|---|---|---|" + strings.Repeat("---|---|", len(cols)) + "\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s |", r.Claim, r.Paper, r.Rule)
		for _, f := range r.Cells {
			holds := "yes"
			switch {
			case f.NotRun:
				holds = "-"
			case !f.Holds:
				holds = "**no**"
			}
			fmt.Fprintf(&b, " %s | %s |", f.Measured, holds)
		}
		b.WriteString("\n")
	}
	return b.String()
}

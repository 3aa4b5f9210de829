package compare

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"time"

	"github.com/thrashscope/thrashscope/internal/report"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/settings"
	"github.com/thrashscope/thrashscope/internal/stats"
	"github.com/thrashscope/thrashscope/internal/store"
	"github.com/thrashscope/thrashscope/internal/swapdev"
)

// A comparison committed to the docs states findings: under one policy a
// measure is lower than under another. Each finding the comparison's own
// runs hold beyond their spread is a Direction, and a run of the same
// comparison at a later commit must keep it (Keeps): a change that turns a
// finding around makes the docs untrue.

// Direction is one finding of a comparison: metric under policy B is lower
// (or higher) than under A, by Ratio of their means.
type Direction struct {
	Metric string
	A, B   string
	Lower  bool
	Ratio  float64 // B's mean over A's, as committed
	// Lo and Hi are the least and the most of the committed runs' pairwise
	// ratios (each run of B over each run of A): what one pair of runs
	// gave, the spread a rerun of one run an arm is held to.
	Lo, Hi float64
}

func (d Direction) String() string {
	word := "higher"
	if d.Lower {
		word = "lower"
	}
	return fmt.Sprintf("%s %s under %s than under %s (×%.2f, one pair of runs ×%.2f to ×%.2f)", d.Metric, word, d.B, d.A, d.Ratio, d.Lo, d.Hi)
}

// A finding is held beyond the spread of its runs when the two means are
// apart by more than twice the two SDs together and by more than a fifth
// (a ratio past 0.8 or 1.25): two runs' SD says little of the spread, and
// a small difference between two such pairs is the host's, not the
// policies'.
const (
	apartSDs   = 2
	apartRatio = 1.25
)

// Directions are the findings of the results rs that their runs hold
// beyond their spread, for every pair of policies (each with two runs or
// more) and every measure both have for all their runs.
func Directions(rs []Result) []Direction {
	order, groups := byArm(rs)
	var out []Direction
	for i, a := range order {
		for _, b := range order[i+1:] {
			for _, m := range metrics {
				if m.reported {
					continue
				}
				va, vb := values(groups[a], m), values(groups[b], m)
				if len(va) < 2 || len(vb) < 2 || len(va) < len(groups[a]) || len(vb) < len(groups[b]) {
					continue
				}
				ma, sa := stats.MeanSD(va)
				mb, sb := stats.MeanSD(vb)
				if ma <= 0 || mb <= 0 {
					continue
				}
				ratio := mb / ma
				if math.Abs(mb-ma) <= apartSDs*(sa+sb) || (ratio < apartRatio && ratio > 1/apartRatio) {
					continue
				}
				lo, hi := pairwise(va, vb)
				out = append(out, Direction{Metric: m.name, A: a, B: b, Lower: mb < ma, Ratio: ratio, Lo: lo, Hi: hi})
			}
		}
	}
	return out
}

// pairwise is the least and the most of vb[j]/va[i] over every pair.
func pairwise(va, vb []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, a := range va {
		for _, b := range vb {
			lo, hi = min(lo, b/a), max(hi, b/a)
		}
	}
	return lo, hi
}

// keepWiden widens a finding's committed interval toward no difference,
// as a factor: one pair of committed runs understates a rerun's spread
// (docs/policies gives the reruns that set it), but a finding shrunk by
// half past them no longer says what the docs say. keepFar widens it
// away from no difference, or the pairs' own spread (Hi/Lo) where that is
// wider: a measure near zero on one side (a peak PSI full of a few per
// cent) makes that side of the ratio unstable (docs/policies; syn8-1.1's
// binpack peak PSI full, committed ×0.05 to ×0.58, read ×0.019 in one CI
// run, binpack's 1.2 % against none's 63 %).
const (
	keepWiden = 1.5
	keepFar   = 2
)

// Keeps checks results rs, of the same comparison at another time, against
// directions ds: it names each finding they turn around, move out of its
// committed interval (Lo to Hi, widened by keepWiden toward no difference
// and by keepFar or the pairs' own spread away from it), or cannot show (a policy or a measure
// missing). A sign alone is not enough: a finding committed at ×0.55 that
// a change shrinks to ×0.99 has not held.
func Keeps(ds []Direction, rs []Result) []string {
	var out []string
	for _, d := range ds {
		switch r := d.RatioIn(rs); {
		case math.IsNaN(r):
			out = append(out, fmt.Sprintf("%s: no %s for %s or %s here", d, d.Metric, d.A, d.B))
		case (r < 1) != d.Lower || r == 1:
			out = append(out, fmt.Sprintf("%s: turned around, ×%.2f here", d, r))
		default:
			far := float64(keepFar)
			if d.Lo > 0 {
				far = max(far, d.Hi/d.Lo)
			}
			lo, hi := d.Lo/keepWiden, d.Hi*far
			if d.Lower {
				lo, hi = d.Lo/far, d.Hi*keepWiden
			}
			if r < lo || r > hi {
				out = append(out, fmt.Sprintf("%s: ×%.2f here, outside ×%.2f to ×%.2f (its pairs widened ×%.2f toward no difference, ×%.1f away from it)", d, r, lo, hi, keepWiden, far))
			}
		}
	}
	return out
}

// RatioIn is d's ratio in results rs: B's mean of its measure over A's;
// NaN where rs lack one.
func (d Direction) RatioIn(rs []Result) float64 {
	_, groups := byArm(rs)
	m := metricNamed(d.Metric)
	va, vb := values(groups[d.A], m), values(groups[d.B], m)
	if len(va) == 0 || len(vb) == 0 {
		return math.NaN()
	}
	ma, _ := stats.MeanSD(va)
	mb, _ := stats.MeanSD(vb)
	return mb / ma
}

func values(rs []Result, m metric) []float64 {
	var vs []float64
	for _, r := range rs {
		if v := m.of(r); !math.IsNaN(v) {
			vs = append(vs, v)
		}
	}
	return vs
}

func metricNamed(name string) metric {
	i := slices.IndexFunc(metrics, func(m metric) bool { return m.name == name })
	if i < 0 {
		return metric{name: name, of: func(Result) float64 { return math.NaN() }}
	}
	return metrics[i]
}

// Committed is a comparison as it was recorded under a directory: the spec
// its runs shared (without their policies and settings), its policies and
// its sets of settings in the order they ran, how many arms, how many
// times each arm ran, the longest any run took, and the results.
type Committed struct {
	Dir      string
	Spec     run.Spec
	Policies []string
	Settings []settings.Asked
	Arms     int
	Repeats  int
	Longest  time.Duration
	Results  []Result
}

// LoadCommitted reads the comparison whose runs are under dir, writing
// nothing. Its runs must share one spec but for the policy and settings.
func LoadCommitted(dir string) (Committed, error) {
	d, err := store.OpenExisting(dir)
	if err != nil {
		return Committed{}, err
	}
	recs, err := d.Records()
	if err != nil {
		return Committed{}, err
	}
	c := Committed{Dir: dir}
	var ids []string
	var first *run.Resolved
	for _, rec := range slices.Backward(recs) { // Records lists the newest first
		if rec.State == run.StateCorrupt || run.Active(rec.State) {
			return Committed{}, fmt.Errorf("%s: run %s is %s", dir, rec.ID, rec.State)
		}
		spec := rec.Spec
		if !slices.Contains(c.Policies, spec.Policy) {
			c.Policies = append(c.Policies, spec.Policy)
		}
		if !slices.ContainsFunc(c.Settings, func(a settings.Asked) bool { return a.Label() == spec.Settings.Label() }) {
			c.Settings = append(c.Settings, spec.Settings)
		}
		spec.Policy, spec.Settings = "", nil
		if first == nil {
			first = &spec
		} else if !reflect.DeepEqual(*first, spec) {
			return Committed{}, fmt.Errorf("%s: run %s has another spec than the first: not one comparison", dir, rec.ID)
		}
		if rec.EndedAt != nil {
			c.Longest = max(c.Longest, rec.EndedAt.Sub(rec.StartedAt))
		}
		ids = append(ids, rec.ID)
	}
	if first == nil {
		return Committed{}, fmt.Errorf("%s: no run", dir)
	}
	recorded, err := report.Load(dir, ids)
	if err != nil {
		return Committed{}, err
	}
	c.Results = resultsOf(recorded)
	if len(c.Settings) == 1 {
		c.Settings = nil // the runs' own, in the spec
		c.Spec = specOf(recorded[0].Record.Spec)
	}
	order, groups := byArm(c.Results)
	c.Arms = len(order)
	for _, p := range order {
		c.Repeats = max(c.Repeats, len(groups[p]))
	}
	if c.Spec.Preset == "" {
		c.Spec = specOf(*first)
	}
	return c, nil
}

// specOf is the spec that resolves to r, every field given, its sizes
// as r has them after its scale (so the scale is left at 1), and no
// policy.
func specOf(r run.Resolved) run.Spec {
	s := run.Spec{
		Preset: r.Preset, Consumers: &r.Consumers, SizeBytes: &r.SizeBytes, WritesPerCycle: &r.WritesPerCycle,
		Sleep: &r.Sleep, Interval: &r.Interval, LeadIn: &r.LeadIn, MemoryLimitBytes: &r.MemoryLimitBytes,
		Backing: &r.Backing, Fill: &r.Fill, SwapDevice: &r.SwapDevice, Settings: r.Settings,
	}
	if r.Repeats > 0 {
		s.Repeats = &r.Repeats
	}
	if r.Cycles > 0 {
		s.Cycles = &r.Cycles
	}
	return s
}

// Rerun runs the committed comparison again, each arm repeats times,
// interleaved, its runs under out: binary is the consumers' loadgen. A run
// still going well past the longest committed one (a quarter more, and two
// minutes at least) is aborted: a comparison committed with --timeout ran
// its slow runs to that bound.
func (c Committed) Rerun(ctx context.Context, repeats int, binary, out string, progress io.Writer) ([]Result, error) {
	return Run(ctx, Config{Spec: c.Spec, Policies: c.Policies, Settings: c.Settings, AllowHostSettings: true, Repeats: repeats, OutDir: out, Binary: binary,
		ProcfsPath: "/proc", Progress: progress, Timeout: min(c.Longest+max(c.Longest/4, 2*time.Minute), run.MaxRunDuration)})
}

// Emulated says whether the comparison ran on an emulated swap device,
// whose runs take up to hours.
func (c Committed) Emulated() bool {
	return c.Spec.SwapDevice != nil && c.Spec.SwapDevice.Profile != "" && c.Spec.SwapDevice.Profile != swapdev.None
}

// CommittedUnder lists the comparisons under root (docs/policies): each
// directory with a compare.txt and the runs beside it.
func CommittedUnder(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "runs" {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "compare.txt" {
			dirs = append(dirs, filepath.Dir(path))
		}
		return nil
	})
	return dirs, err
}

package compare

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/stats"
)

// A SettingsFinding is one row of the README's table of what the committed
// comparisons of memory settings (docs/settings) found, set against the
// published claim or the seed's lesson it speaks to.
type SettingsFinding struct {
	// Finding names what is compared, and where.
	Finding string
	// Claim is the published claim, with its source.
	Claim string
	// Measure reads the comparisons, by their directory's name under the
	// root, and says what they show and whether that agrees with the claim.
	Measure func(cs Comparisons) (shows, agrees string, err error)
}

// Comparisons are committed comparisons by their directory's name.
type Comparisons map[string]Committed

// LoadComparisons reads every comparison under root.
func LoadComparisons(root string) (Comparisons, error) {
	dirs, err := CommittedUnder(root)
	if err != nil {
		return nil, err
	}
	cs := Comparisons{}
	for _, d := range dirs {
		c, err := LoadCommitted(d)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, d)
		cs[rel] = c
	}
	return cs, nil
}

// arm is the results of one arm of the named comparison.
func (cs Comparisons) arm(dir, arm string) ([]Result, error) {
	c, ok := cs[dir]
	if !ok {
		return nil, fmt.Errorf("no comparison %s", dir)
	}
	_, groups := byArm(c.Results)
	rs := groups[arm]
	if len(rs) == 0 {
		return nil, fmt.Errorf("%s has no arm %q", dir, arm)
	}
	return rs, nil
}

// of is a measure of one result: a column of the table, or a cost the
// kernel counted (settings.CostNames); NaN where it has none.
func of(r Result, measure string) float64 {
	if i := slices.IndexFunc(metrics, func(m metric) bool { return m.name == measure }); i >= 0 {
		return metrics[i].of(r)
	}
	if v, ok := r.Cost[measure]; ok {
		return v
	}
	return math.NaN()
}

// mean is the measure over an arm's runs that have it (as the comparison's
// table: a run that did not complete has no makespan, and its other
// figures up to its end): its mean, SD and how many runs had it.
func (cs Comparisons) mean(dir, arm, measure string) (mean, sd float64, n int, err error) {
	rs, err := cs.arm(dir, arm)
	if err != nil {
		return 0, 0, 0, err
	}
	var vs []float64
	for _, r := range rs {
		if v := of(r, measure); !math.IsNaN(v) {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return math.NaN(), math.NaN(), 0, nil
	}
	mean, sd = stats.MeanSD(vs)
	return mean, sd, len(vs), nil
}

// failed counts an arm's runs that did not complete, of how many.
func (cs Comparisons) failed(dir, arm string) (failed, of int, err error) {
	rs, err := cs.arm(dir, arm)
	for _, r := range rs {
		if r.State != run.StateCompleted {
			failed++
		}
	}
	return failed, len(rs), err
}

// apart says whether arm b's mean of the measure lies beyond the runs'
// spread from arm a's (Directions' rule), and which way: -1 lower, +1
// higher, 0 within the spread.
func (cs Comparisons) apart(dir, a, b, measure string) (int, error) {
	ma, sa, na, err := cs.mean(dir, a, measure)
	if err != nil {
		return 0, err
	}
	mb, sb, nb, err := cs.mean(dir, b, measure)
	if err != nil {
		return 0, err
	}
	if na < 2 || nb < 2 || ma <= 0 || mb <= 0 {
		return 0, nil
	}
	ratio := mb / ma
	if math.Abs(mb-ma) <= apartSDs*(sa+sb) || (ratio < apartRatio && ratio > 1/apartRatio) {
		return 0, nil
	}
	if mb < ma {
		return -1, nil
	}
	return 1, nil
}

// costWords name the byte counts a contrast gives in MiB.
var costWords = map[string]string{
	"swap_disk_written_bytes": "written to the swap disk",
	"swap_disk_read_bytes":    "read from it",
}

// SettingsTable is the README's table of the settings comparisons under
// root: one row per finding.
func SettingsTable(root string, rows []SettingsFinding) (string, error) {
	cs, err := LoadComparisons(root)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| finding | claim | thrashscope | agrees? |\n|---|---|---|---|\n")
	var errs []error
	for _, r := range rows {
		shows, agrees, err := r.Measure(cs)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.Finding, err))
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.Finding, r.Claim, shows, agrees)
	}
	return b.String(), errors.Join(errs...)
}

// ms is a mean ± SD as the tables write it.
func ms(mean, sd float64) string {
	if math.IsNaN(mean) {
		return "–"
	}
	return num(mean) + " ± " + num(sd)
}

// contrast is arm b's measure against arm a's in one comparison: their
// means ± SD, the ratio, and whether b lies beyond the runs' spread below
// (-1) or above (+1) a, or within it (0).
func (cs Comparisons) contrast(dir, a, b, measure string) (text string, way int, err error) {
	ma, sa, _, err := cs.mean(dir, a, measure)
	if err != nil {
		return "", 0, err
	}
	mb, sb, _, err := cs.mean(dir, b, measure)
	if err != nil {
		return "", 0, err
	}
	way, err = cs.apart(dir, a, b, measure)
	short := func(arm string) string { // "<policy>, swap=zswap" is zswap, in a row about that policy
		if i := strings.LastIndex(arm, ", "); i >= 0 {
			arm = arm[i+2:]
		}
		return strings.TrimPrefix(arm, "swap=")
	}
	name, unit := measure, ""
	if w, ok := costWords[measure]; ok {
		name, unit = w, " MiB"
		ma, sa, mb, sb = ma/(1<<20), sa/(1<<20), mb/(1<<20), sb/(1<<20)
	}
	ratio := "×" + num(mb/ma)
	if math.IsNaN(mb / ma) {
		ratio = "no ratio"
	}
	return fmt.Sprintf("%s: %s %s%s → %s %s%s (%s)", name, short(a), ms(ma, sa), unit, short(b), ms(mb, sb), unit, ratio), way, err
}

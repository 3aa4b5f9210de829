package report

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"

	"gonum.org/v1/plot/vg"

	"github.com/thrashscope/thrashscope/internal/analysis"
	"github.com/thrashscope/thrashscope/internal/figures"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
)

// figure is one report image, drawn as PNG and SVG.
type figure struct {
	title         string
	width, height vg.Length // 1 pt is 4/3 px in the PNG (96 dpi)
	rows          [][]figures.Chart
}

func (f figure) formats() []figures.Format { return []figures.Format{figures.PNG, figures.SVG} }

func (f figure) render(format figures.Format) ([]byte, error) {
	var b bytes.Buffer
	err := figures.RenderFigure(&b, format, f.width, f.height, f.title, f.rows...)
	return b.Bytes(), err
}

const (
	mib      = 1 << 20
	timeAxis = "time since the run started (s)"
)

// paperFigures are the figure numbers of Maziero et al. (2013) for each of
// their experiments: CPU, then paging.
var paperFigures = map[string][2]int{"e1": {4, 5}, "e2": {6, 7}, "e3": {8, 9}, "e4": {10, 11}}

// describe is a run in a few words: preset, scale and shape.
func describe(rec run.Record) string {
	s := rec.Spec
	if s.Traits().Chunks {
		return fmt.Sprintf("fill (%d chunks of %s into %s, %d repeats)", s.Consumers, size(s.SizeBytes), size(s.MemoryLimitBytes), s.Repeats)
	}
	swap := ""
	if !s.SwapDevice.IsNone() {
		swap = ", swap " + s.SwapDevice.Profile
	}
	// S in decimal MB as the paper gives it; the limit in binary units.
	return fmt.Sprintf("%s at scale %g (%d × %.3g MB in %s, %s%s)", s.Preset, s.Scale, s.Consumers, float64(s.SizeBytes)/1e6, size(s.MemoryLimitBytes), s.Backing, swap)
}

func size(b int64) string {
	if b >= 1<<30 {
		return fmt.Sprintf("%.3g GiB", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%.3g MiB", float64(b)/mib)
}

// paperFigure is the paper's figure pair for a run, raw on the left and
// Bézier-smoothed on the right, as Fig 3 shows them.
func paperFigure(r analysis.Recorded) figure {
	n := len(r.Samples)
	x, user, system, in, out := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	for i, s := range r.Samples {
		x[i], user[i], system[i] = s.ElapsedSeconds, s.CPUUserPercent, s.CPUSystemPercent
		in[i], out[i] = s.SwapInPagesPerSecond, s.SwapOutPagesPerSecond
	}
	cpuRaw, pagingRaw := figures.CPUChart(x, user, system), figures.PagingChart(x, in, out)
	cpuRaw.XLabel, pagingRaw.XLabel = timeAxis, timeAxis
	cpuSmooth, pagingSmooth := cpuRaw, pagingRaw
	cpuSmooth.Smooth, pagingSmooth.Smooth = true, true
	cpuName, pagingName := "CPU usage", "Paging activity (swap)"
	source := "Maziero et al. 2013 style"
	if nums, ok := paperFigures[r.Record.Spec.Preset]; ok {
		cpuName = fmt.Sprintf("CPU usage (Fig %d)", nums[0])
		pagingName = fmt.Sprintf("Paging activity (Fig %d)", nums[1])
		source = fmt.Sprintf("Maziero et al. 2013, Figs %d-%d", nums[0], nums[1])
	}
	cpuRaw.Title, cpuSmooth.Title = cpuName+", raw", cpuName+", Bézier-smoothed"
	pagingRaw.Title, pagingSmooth.Title = pagingName+", raw", pagingName+", Bézier-smoothed"
	return figure{
		title: fmt.Sprintf("Run %s, %s: %s; raw and smoothed as Fig 3", r.Record.ID, describe(r.Record), source),
		width: 900, height: 600,
		rows: [][]figures.Chart{{cpuRaw, cpuSmooth}, {pagingRaw, pagingSmooth}},
	}
}

// maxProcessPanels is how many consumers get a panel of their own. All 25
// of e4 would leave each panel too small to read; the chosen ones show the
// schedule's first, middle and last consumer and the hardest hit.
const maxProcessPanels = 5

// processFigure draws TPF's memory allocation demand against RSS (Jiang and
// Zhang 2001): one panel for all consumers against the cgroup limit, then
// chosen consumers one by one.
func processFigure(r analysis.Recorded) figure {
	rec := r.Record
	end := r.Samples[len(r.Samples)-1].ElapsedSeconds
	if rec.EndedAt != nil {
		end = max(end, rec.EndedAt.Sub(rec.StartedAt).Seconds())
	}
	// The cgroup is made empty when the run starts.
	x, demand, usage := []float64{0}, []float64{0}, []float64{0}
	for _, s := range r.Samples {
		x = append(x, s.ElapsedSeconds)
		demand = append(demand, float64(s.DemandBytes)/mib)
		usage = append(usage, float64(s.CgroupUsageBytes)/mib)
	}
	limit := float64(rec.Spec.MemoryLimitBytes) / mib
	zero := 0.0
	all := figures.Chart{
		Title: "All consumers", XLabel: timeAxis, YLabel: "MiB",
		Series:  []figures.Series{{Name: "demand", X: x, Y: demand}, {Name: "cgroup usage", X: x, Y: usage}},
		RefLine: &limit, YMin: &zero,
	}
	charts := []figures.Chart{all}
	byConsumer := map[int][]store.ProcessRow{}
	for _, p := range r.Processes {
		byConsumer[p.Consumer] = append(byConsumer[p.Consumer], p)
	}
	for _, pick := range chooseConsumers(r, byConsumer) {
		charts = append(charts, consumerChart(r, pick, byConsumer[pick.index], end))
	}
	rows := [][]figures.Chart{charts[:min(3, len(charts))]}
	if len(charts) > 3 {
		rows = append(rows, charts[3:])
	}
	return figure{
		title: fmt.Sprintf("Run %s (%s at scale %g): memory demand vs resident set (Jiang and Zhang 2001); dashed: the cgroup limit", rec.ID, rec.Spec.Preset, rec.Spec.Scale),
		width: 900, height: 300 * vg.Length(len(rows)),
		rows: rows,
	}
}

type pick struct {
	index int
	why   string
}

// chooseConsumers picks up to maxProcessPanels consumers that have rows:
// the first, middle and last to start, the one with the most major faults,
// the latest to finish and the first the OOM killer took.
func chooseConsumers(r analysis.Recorded, rows map[int][]store.ProcessRow) []pick {
	n := len(r.Record.Consumers)
	faults := func(i int) float64 {
		var sum float64
		for _, p := range rows[i] {
			if v, ok := p.MajorFaultRate(); ok {
				sum += v
			}
		}
		return sum
	}
	var cands []pick
	add := func(i int, why string) {
		if _, ok := rows[i]; ok && i >= 0 {
			cands = append(cands, pick{i, why})
		}
	}
	for _, c := range r.Record.Consumers {
		if c.Exit == "oom-killed" {
			add(c.Index, "OOM-killed")
			break
		}
	}
	for _, d := range r.Record.Decisions {
		if d.Kind == "protect" || d.Kind == "freeze" {
			add(d.Consumer, "first held by "+r.Record.Spec.Policy)
			break
		}
	}
	if n > 0 {
		most, late := -1, -1
		for i := range n {
			if _, ok := rows[i]; !ok {
				continue
			}
			if most < 0 || faults(i) > faults(most) {
				most = i
			}
			if c := r.Record.Consumers[i]; c.LatenessSeconds > 0 && (late < 0 || c.LatenessSeconds > r.Record.Consumers[late].LatenessSeconds) {
				late = i
			}
		}
		add(most, "most major faults")
		add(late, "latest to finish")
		add(0, "first")
		add(n-1, "last")
		add(n/2, "middle")
	}
	var out []pick
	for _, c := range cands {
		if j := slices.IndexFunc(out, func(p pick) bool { return p.index == c.index }); j >= 0 {
			continue
		}
		if len(out) < maxProcessPanels {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b pick) int { return cmp.Compare(a.index, b.index) })
	return out
}

// consumerChart is one consumer's demand (a step from its actual start to
// its actual end), RSS, swap and working set, in MiB.
func consumerChart(r analysis.Recorded, p pick, rows []store.ProcessRow, end float64) figures.Chart {
	rec := r.Record
	c := rec.Consumers[p.index]
	var dx, dy []float64
	if rec.Spec.Traits().Scheduled && c.ActualStart != nil {
		s := c.ActualStart.Sub(rec.StartedAt).Seconds()
		e := end
		if c.ActualEnd != nil {
			e = c.ActualEnd.Sub(rec.StartedAt).Seconds()
		}
		d := float64(rec.Spec.SizeBytes) / mib
		dx, dy = []float64{0, s, s, e, e, end}, []float64{0, 0, d, d, 0, 0}
	} else {
		dx, dy = []float64{0}, []float64{0}
		for _, row := range rows {
			dx, dy = append(dx, row.ElapsedSeconds), append(dy, float64(row.DemandBytes)/mib)
		}
	}
	var x, rss, swap, wsx, ws []float64
	for _, row := range rows {
		x = append(x, row.ElapsedSeconds)
		rss = append(rss, float64(row.ResidentBytes)/mib)
		swap = append(swap, float64(row.SwapBytes)/mib)
		if v, ok := row.WorkingSet(); ok {
			wsx, ws = append(wsx, row.ElapsedSeconds), append(ws, float64(v)/mib)
		}
	}
	zero := 0.0
	series := []figures.Series{
		{Name: "demand", X: dx, Y: dy},
		{Name: "RSS", X: x, Y: rss},
		{Name: "swap", X: x, Y: swap},
		{Name: "working set", X: wsx, Y: ws},
	}
	if hx, hy, name := heldSteps(rec, p.index, end); hx != nil {
		series = append(series, figures.Series{Name: name, X: hx, Y: hy})
	}
	return figures.Chart{
		Title:  fmt.Sprintf("%s (%s)", run.ConsumerName(p.index), p.why),
		XLabel: timeAxis, YLabel: "MiB",
		Series: series,
		YMin:   &zero,
	}
}

// heldSteps marks where the run's policy held consumer i: a step up to
// 1.1 × S while held, 0 otherwise; nil when it was never held.
func heldSteps(rec run.Record, i int, end float64) (x, y []float64, name string) {
	spans, how := analysis.HeldSpans(rec, i, end)
	if how == "" {
		return nil, nil, ""
	}
	high := float64(rec.Spec.SizeBytes) / mib * 11 / 10
	x, y = []float64{0}, []float64{0}
	for _, sp := range spans {
		x, y = append(x, sp[0], sp[0], sp[1], sp[1]), append(y, 0, high, high, 0)
	}
	return append(x, end), append(y, 0), how + " (" + rec.Spec.Policy + ")"
}

// stabilityFigure overlays the runs' smoothed swap-in and CPU curves on one
// time axis, as Fig 12 overlays the paper's three repeats.
func stabilityFigure(runs []analysis.Recorded) figure {
	in := figures.Chart{Title: "Swap-in, Bézier-smoothed", XLabel: timeAxis, YLabel: "pages/s", Smooth: true}
	cpu := figures.Chart{Title: "CPU user + system, Bézier-smoothed", XLabel: timeAxis, YLabel: "CPU (% of all CPUs)", Smooth: true}
	// Runs at several scales are compared per MiB of their limit: a scale
	// that keeps the physics gives the same curve.
	scaled := slices.ContainsFunc(runs, func(r analysis.Recorded) bool { return r.Record.Spec.Scale != runs[0].Record.Spec.Scale })
	if scaled {
		in.Title, in.YLabel = "Swap-in per MiB of limit, Bézier-smoothed", "pages/s per MiB"
	}
	for _, r := range runs {
		var x, si, busy []float64
		per := 1.0
		name := r.Record.ID
		if scaled {
			per = float64(r.Record.Spec.MemoryLimitBytes) / mib
			name = fmt.Sprintf("scale %g, %s", r.Record.Spec.Scale, r.Record.ID)
		}
		for _, s := range r.Samples {
			x = append(x, s.ElapsedSeconds)
			si = append(si, s.SwapInPagesPerSecond/per)
			busy = append(busy, s.CPUUserPercent+s.CPUSystemPercent)
		}
		in.Series = append(in.Series, figures.Series{Name: name, X: x, Y: si})
		cpu.Series = append(cpu.Series, figures.Series{Name: name, X: x, Y: busy})
	}
	zero, hundred := 0.0, 100.0
	in.YMin, cpu.YMin, cpu.YMax = &zero, &zero, &hundred
	title := fmt.Sprintf("Stability: %d runs of %s, overlaid (Maziero et al. 2013, Fig 12)", len(runs), describe(runs[0].Record))
	if scaled {
		title = fmt.Sprintf("Scales compared: %d runs of %s per MiB of limit, overlaid", len(runs), runs[0].Record.Spec.Preset)
	}
	return figure{
		title: title,
		width: 900, height: 340,
		rows: [][]figures.Chart{{in, cpu}},
	}
}

// fillFigure is seed 002's result: the fill time of each chunk, mean ± 1 SD
// over the repeats, and the free memory and swap as the fill went on.
func fillFigure(r analysis.Recorded) figure {
	var x, mean, sd, free, swap []float64
	repeats := 0
	for _, f := range r.Fill {
		x = append(x, float64(f.AllocatedBytes)/mib)
		mean, sd = append(mean, f.MeanSeconds), append(sd, f.SDSeconds)
		free, swap = append(free, f.MemoryFreeBytes/mib), append(swap, f.SwapFreeBytes/mib)
		repeats = max(repeats, f.Repeats)
	}
	zero := 0.0
	const xl = "allocated, with this chunk (MiB)"
	fill := figures.Chart{Title: fmt.Sprintf("Fill time per chunk, mean ± 1 SD of %d", repeats), XLabel: xl, YLabel: "seconds",
		Series: []figures.Series{{Name: "fill time", X: x, Y: mean, YErr: sd}}, YMin: &zero}
	mem := figures.Chart{Title: "Host memory while filling", XLabel: xl, YLabel: "MiB",
		Series: []figures.Series{{Name: "free memory", X: x, Y: free}, {Name: "free swap", X: x, Y: swap}}, YMin: &zero}
	return figure{
		title: fmt.Sprintf("Run %s, %s: swap overhead by progressive fill (seed 002)", r.Record.ID, describe(r.Record)),
		width: 900, height: 340,
		rows: [][]figures.Chart{{fill, mem}},
	}
}

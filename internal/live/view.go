package live

import (
	"cmp"
	"fmt"
	"html/template"
	"math"
	"slices"
	"time"

	"github.com/thrashscope/thrashscope/internal/diagnosis"
	"github.com/thrashscope/thrashscope/internal/history"
	"github.com/thrashscope/thrashscope/internal/indicators"
)

var nan = math.NaN()

// maxRows bounds the top-thrashers table; a run may pin up to 512
// consumers.
const maxRows = 30

// view is what the page and its status fragment show.
type view struct {
	Generation    uint64
	RefreshMillis int64
	Interval      time.Duration
	Figures       []string
	TokenRequired bool
	RunsEnabled   bool

	Waiting bool // no sample with rates yet
	Latest  history.Point
	At      time.Time
	Reach   time.Duration // how far back the figures reach at most
	State   string        // normal, monitoring, thrashing, or off

	Rows   []history.ProcessRow
	Hidden int // rows past maxRows
	// Workloads are the busiest cgroups, as the metrics export them.
	Workloads []history.WorkloadRow

	Run    RunStatus
	HasRun bool

	// Diagnoses are the open diagnoses; DiagnosesOn whether the observer
	// makes any.
	Diagnoses   []diagnosis.Diagnosis
	DiagnosesOn bool
}

func (h *Handler) view() view {
	v := view{
		Generation:    h.opts.History.Generation(),
		RefreshMillis: max(h.opts.Interval, minRefresh).Milliseconds(),
		Interval:      h.opts.Interval,
		Figures:       FigureNames,
		TokenRequired: h.opts.TokenRequired,
		RunsEnabled:   h.opts.Run != nil,
		State:         "off",
		Reach:         min(history.Span, time.Duration(h.opts.History.Cap())*h.opts.Interval),
	}
	if h.opts.Run != nil {
		v.Run, v.HasRun = h.opts.Run()
	}
	if h.opts.Diagnoses != nil {
		v.Diagnoses, v.DiagnosesOn = h.opts.Diagnoses(), true
	}
	_, newest, ok := h.opts.History.Ends()
	if !ok {
		v.Waiting = true
		return v
	}
	v.Latest, v.At = newest, newest.Time()
	if s := v.Latest.State; s >= 0 && int(s) < len(indicators.StateNames) {
		v.State = indicators.StateNames[s]
	}
	top := h.opts.History.Top()
	rows := slices.Clone(top.Rows)
	// Busiest first by this interval's faults, then stall; the sampler's
	// order (decayed activity, then pinned) breaks ties.
	slices.SortStableFunc(rows, func(a, b history.ProcessRow) int {
		return cmp.Or(cmp.Compare(faults(b), faults(a)), cmp.Compare(b.StallPercent, a.StallPercent))
	})
	if len(rows) > maxRows {
		v.Hidden = len(rows) - maxRows
		rows = rows[:maxRows]
	}
	v.Rows = rows
	v.Workloads = top.Workloads
	return v
}

func faults(r history.ProcessRow) float64 {
	return r.AnonFaults + r.ShmemFaults + r.FileFaults + r.UnknownFaults
}

var funcs = template.FuncMap{
	"rate":    rate,
	"bytes":   humanBytes,
	"percent": func(v float64) string { return fmt.Sprintf("%.0f %%", v) },
	"ratio": func(v float32) string {
		if v != v {
			return "–"
		}
		return fmt.Sprintf("%.2f", v)
	},
	"clock":       func(t time.Time) string { return t.Local().Format("15:04:05") },
	"seconds":     func(d time.Duration) string { return d.Round(time.Second).String() },
	"millis":      func(d time.Duration) int64 { return d.Milliseconds() },
	"minDuration": func(a, b time.Duration) time.Duration { return min(a, b) },
	"reach": func(d time.Duration) string {
		if d%time.Minute == 0 {
			return fmt.Sprintf("%d minutes", d/time.Minute)
		}
		return d.Round(time.Second).String()
	},
	"rowRate": func(r history.ProcessRow, v float64) string {
		if !r.HasRates {
			return "–"
		}
		return rate(v)
	},
	"stall": func(r history.ProcessRow) string {
		if !r.HasStall {
			return "–"
		}
		return fmt.Sprintf("%.0f %%", r.StallPercent)
	},
}

// rate prints a per-second figure compactly: 0, 7.5, 312, 46.6k.
func rate(f float64) string {
	switch a := math.Abs(f); {
	case a >= 1e4:
		return fmt.Sprintf("%.1fk", f/1e3)
	case a >= 100 || a == 0:
		return fmt.Sprintf("%.0f", f)
	default:
		return fmt.Sprintf("%.1f", f)
	}
}

// humanBytes prints bytes in binary units: 512 B, 7.0 MiB, 1.5 GiB.
func humanBytes(v any) string {
	var b float64
	switch x := v.(type) {
	case uint64:
		b = float64(x)
	case int64:
		b = float64(x)
	}
	if b < 1024 {
		return fmt.Sprintf("%.0f B", b)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	i := -1
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", b, units[i])
}

package observer

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/diagnosis"
)

// diagnosisWatch follows GET /api/v1/diagnoses through a run beside the
// scrapes: when the run's workload first reads thrashing, when a diagnosis
// of its group first opens, and at each look the diagnosis's shortfall
// beside the arithmetic's, the run's demand (active consumers × S) less
// its limit.
type diagnosisWatch struct {
	runGroup          string
	thrashing, opened time.Time
	last              *diagnosis.Diagnosis
	looks             []shortfallLook
}

type shortfallLook struct {
	demand, limit, shortfall float64
	binding                  string // the binding limit's kind and group, or why none
	basis                    string // what the shortfall rests on
	summary                  string
}

// look takes one scrape and one answer of the diagnoses' endpoint.
func (w *diagnosisWatch) look(t *testing.T, d *daemon, now time.Time) {
	_, scrape := get(t, d.url+"/metrics")
	if w.thrashing.IsZero() && thrashingIn(scrape, w.runGroup) {
		w.thrashing = now
	}
	code, body := d.do(t, "GET", "/api/v1/diagnoses", "")
	if code != 200 {
		t.Fatalf("GET /api/v1/diagnoses: %d %s", code, body)
	}
	var l struct{ Open, Closed []diagnosis.Diagnosis }
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatalf("GET /api/v1/diagnoses: %v", err)
	}
	for _, dg := range l.Open {
		if !strings.HasSuffix(dg.Labels["cgroup"], w.runGroup) {
			continue
		}
		if w.opened.IsZero() {
			w.opened = now
		}
		w.last = &dg
		demand, limit := scrapeValue(scrape, "thrashscope_run_demand_bytes"), scrapeValue(scrape, "thrashscope_run_memory_limit_bytes")
		if demand >= 0 && limit > 0 {
			b := "none: " + dg.NoBinding
			if dg.Binding != nil {
				b = string(dg.Binding.Kind) + " " + dg.Binding.Group
			}
			w.looks = append(w.looks, shortfallLook{demand: demand, limit: limit, shortfall: float64(dg.Shortfall.Bytes), binding: b, basis: dg.Shortfall.Basis, summary: dg.Summary})
		}
	}
}

// check holds what the watch saw to the run: a diagnosis open within 3 s
// of the workload's thrashing, its own limit the binding one at every look
// while it was open, and on the
// demand's plateau (within 10 % of its peak) its shortfall within 20 % of
// the arithmetic's.
func (w *diagnosisWatch) check(t *testing.T, start time.Time) {
	t.Helper()
	switch {
	case w.thrashing.IsZero():
		t.Error("diagnoses: the run's workload never read thrashing in a scrape")
		return
	case w.opened.IsZero():
		t.Errorf("diagnoses: none opened for the run's group %s", w.runGroup)
		return
	case w.opened.Sub(w.thrashing) > 3*time.Second:
		t.Errorf("diagnoses: opened %s after the workload read thrashing, want within 3 s", w.opened.Sub(w.thrashing).Round(100*time.Millisecond))
	}
	t.Logf("diagnoses: the workload thrashing at %s, its diagnosis open at %s; last: %s (demand %+v, shortfall from %s)",
		w.thrashing.Sub(start).Round(100*time.Millisecond), w.opened.Sub(start).Round(100*time.Millisecond), w.last.Summary, w.last.Demand, w.last.Shortfall.Basis)
	for _, l := range w.looks {
		if !strings.HasPrefix(l.binding, string(diagnosis.LimitOwn)+" ") || !strings.HasSuffix(l.binding, w.runGroup) {
			t.Errorf("diagnoses: binding %q at a look, want the run group's own limit", l.binding)
			break
		}
	}
	peak := 0.0
	for _, l := range w.looks {
		peak = max(peak, l.demand)
	}
	var got, want []float64
	for _, l := range w.looks {
		if l.demand >= 0.9*peak {
			if len(got) == 0 {
				t.Logf("diagnoses: on the plateau: %s", l.summary)
			}
			got, want = append(got, l.shortfall), append(want, l.demand-l.limit)
			// The consumers' whole footprint is their demand, so a
			// shortfall from what the group holds would agree too: the
			// working sets must be what it rests on.
			if !strings.Contains(l.basis, "working set of its processes") {
				t.Errorf("diagnoses: the shortfall on the plateau rests on %q, want the processes' working sets", l.basis)
				return
			}
		}
	}
	if len(got) < 3 {
		t.Errorf("diagnoses: %d looks on the demand's plateau, want 3 or more", len(got))
		return
	}
	g, a := medianOf(got), medianOf(want)
	t.Logf("diagnoses: shortfall on the plateau (%d looks) median %.0f MiB, arithmetic %.0f MiB: %+.0f%%", len(got), g/(1<<20), a/(1<<20), 100*(g/a-1))
	if g < 0.8*a || g > 1.2*a {
		t.Errorf("diagnoses: the shortfall's plateau median %.0f MiB is more than 20%% from the arithmetic %.0f MiB", g/(1<<20), a/(1<<20))
	}
}

package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/diagnosis"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// TestSuite is the suite's short form: its quick scenarios under a real
// observer, each judged as the suite judges it (the binding limit, the
// shortfall within 20 % of the truth, the first remedy applied ending the
// thrash within 10 s for good), but for a shortfall that reads low where
// the scenario names the gap: that one is logged, and make bench fails on
// it.
func TestSuite(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	prom := testenv.RequireTool(t, "prometheus", "prometheus")
	o := options{observer: filepath.Join(testenv.BinaryDir(t), "observer"), prometheus: prom, log: t.Logf}
	quick := 0
	for _, s := range scenarios {
		if !s.quick {
			continue
		}
		quick++
		t.Run(s.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			r, err := o.run(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			writeText(&b, []*result{r})
			t.Logf("\n%s\nsummary: %s\nkind %s; evidence %+v", b.String(), r.Summary, r.Kind, r.Evidence)
			for _, p := range r.problems() {
				t.Error(p)
			}
		})
	}
	if quick == 0 {
		t.Error("no quick scenario: make test would hold no diagnosis to its remedy")
	}
}

// TestProblems: each bound the suite holds a result to fails a result
// outside it.
func TestProblems(t *testing.T) {
	good := func() *result {
		return &result{Scenario: "s", Binding: diagnosis.LimitOwn, Shortfall: 200 << 20, Remedy: diagnosis.ActionRaiseLimit,
			Opened: time.Second, GotBinding: "own /x/thrashscope-run-1", BindingRight: true, GotShortfall: 210 << 20, Looks: looksBeforeRemedy,
			GotRemedy: diagnosis.Remedy{Action: diagnosis.ActionRaiseLimit, Bytes: 420 << 20}, EndedAfter: 4 * time.Second, StayedEnded: true,
			EndedBy: "/x/thrashscope-run-1's memory.max changed from 320 MiB to 420 MiB"}
	}
	if p := good().problems(); len(p) != 0 {
		t.Fatalf("a result within every bound: %v", p)
	}
	shared := good()
	shared.Culprit, shared.Took = "/thrashscope-bench-neighbour", 100<<20
	shared.GotCulprit, shared.GotTook = "/x/thrashscope-bench-neighbour", 94<<20
	if p := shared.problems(); len(p) != 0 {
		t.Fatalf("a shared limit's culprit named, its growth within bounds: %v", p)
	}
	for name, spoil := range map[string]func(*result){
		"opened late":                        func(r *result) { r.Opened = 4 * time.Second },
		"binding wrong":                      func(r *result) { r.BindingRight = false },
		"too few looks":                      func(r *result) { r.Looks = 2 },
		"shortfall high":                     func(r *result) { r.GotShortfall = 250 << 20 },
		"shortfall low":                      func(r *result) { r.GotShortfall = 150 << 20 },
		"another remedy":                     func(r *result) { r.GotRemedy.Action = diagnosis.ActionWait },
		"not ended":                          func(r *result) { r.EndedAfter, r.StayedEnded = 0, false },
		"ended late":                         func(r *result) { r.EndedAfter = 11 * time.Second },
		"came back":                          func(r *result) { r.StayedEnded = false },
		"random pages, compressed swap kept": func(r *result) { r.Kind = diagnosis.KindAnon },
		"zeros, compressed swap not advised": func(r *result) {
			r.Kind, r.Compressible = diagnosis.KindAnon, true
			r.Useless = []diagnosis.Useless{{Action: diagnosis.ActionCompressedSwap}}
		},
		"ended by another": func(r *result) {
			r.EndedBy = "its pressure eased with no change in its limits, processes or demand that the observer saw"
		},
		"failed to run": func(r *result) { r.Err = "no diagnosis" },
		"culprit wrong": func(r *result) {
			r.Culprit, r.Took = "/thrashscope-bench-neighbour", 100<<20
			r.GotCulprit, r.GotTook = "/x/thrashscope-other", 100<<20
		},
		"culprit's growth off": func(r *result) {
			r.Culprit, r.Took = "/thrashscope-bench-neighbour", 100<<20
			r.GotCulprit, r.GotTook = "/x/thrashscope-bench-neighbour", 300<<20
		},
	} {
		r := good()
		spoil(r)
		if len(r.problems()) == 0 {
			t.Errorf("%s: no problem found", name)
		}
	}
}

package main

import (
	"strings"
	"testing"
	"time"
)

// testRules are the shipped thrash alerts as the judge reads them.
func testRules() []rule {
	return []rule{
		{Alert: hostAlert, Labels: map[string]string{"severity": "critical"}, For: "5s", interval: 5 * time.Second},
		{Alert: workloadAlert, Labels: map[string]string{"severity": "critical"}, For: "5s", interval: 5 * time.Second},
		{Alert: "ThrashscopeProcessMajorFaults", Labels: map[string]string{"severity": "info"}, For: "15s", interval: 5 * time.Second},
	}
}

func on(from, to time.Time) trace { return trace{Eps: []episode{{From: from, To: to}}} }

// A thrash caught in time by everything that applies to it.
func caught(t0 time.Time) *observation {
	onset := t0.Add(10 * time.Second)
	end := t0.Add(60 * time.Second)
	o := &observation{Scenario: "e4", Thrash: true, Begin: t0, Onset: onset, End: end,
		Host: on(onset.Add(600*time.Millisecond), end), Target: on(onset.Add(400*time.Millisecond), end),
		Alerts: map[string]*trace{}}
	o.AnyWorkload = o.Target
	for _, name := range []string{hostAlert, workloadAlert + namedSuffix} {
		tr := on(onset.Add(8*time.Second), end)
		o.Alerts[name] = &tr
	}
	return o
}

func benign(t0 time.Time) *observation {
	return &observation{Scenario: "readback", Begin: t0, Onset: t0, End: t0.Add(35 * time.Second),
		Alerts: map[string]*trace{}, Kernel: kernelCounts{SwapIns: 61842, MajorFaults: 61814}}
}

// A slow climb meets its limit before its planned onset (the consumers'
// own pages are not in the plan): a state on from that moment is not a
// false alarm.
func TestOnFromTheLimitIsNoFalseAlarm(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	o := caught(t0)
	o.LimitMet = o.Onset.Add(-5 * time.Second)
	o.Host = trace{Eps: append([]episode{{From: o.LimitMet.Add(time.Second), To: o.LimitMet.Add(2 * time.Second)}}, o.Host.Eps...)}
	o.Target = trace{Eps: append([]episode{{From: o.LimitMet.Add(time.Second), To: o.LimitMet.Add(2 * time.Second)}}, o.Target.Eps...)}
	if p := judge(testRules(), []*observation{o}); len(p) != 0 {
		t.Fatalf("states on after the group met its limit, before the planned onset: %q", p)
	}
	o.LimitMet = time.Time{}
	if p := judge(testRules(), []*observation{o}); len(p) == 0 {
		t.Fatal("states on before the planned onset, the limit never met: no false alarm named")
	}
}

// The judge holds every cell the table shows: each case breaks one, and
// the judge must name it.
func TestJudgeHoldsEveryCell(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	if p := judge(testRules(), []*observation{caught(t0), benign(t0)}); len(p) != 0 {
		t.Fatalf("a thrash caught in time and a quiet benign load judged wrong: %q", p)
	}
	for _, c := range []struct {
		name   string
		break_ func(o *observation)
		want   string
	}{
		{"the host detector never reaches thrashing", func(o *observation) { o.Host = trace{} }, "host detector in thrashing never"},
		{"the host detector late", func(o *observation) { o.Host = on(o.Onset.Add(1500*time.Millisecond), o.End) }, "host detector in thrashing 1.5 s"},
		{"the host alert never fires", func(o *observation) { delete(o.Alerts, hostAlert) }, hostAlert + " fired never"},
		{"the workload alert late", func(o *observation) {
			tr := on(o.Onset.Add(16*time.Second), o.End)
			o.Alerts[workloadAlert+namedSuffix] = &tr
		}, workloadAlert + " fired 16.0 s"},
		{"the workload named late", func(o *observation) { o.Target = on(o.Onset.Add(3*time.Second), o.End) }, "its workload named 3.0 s"},
		{"an alert before the onset", func(o *observation) {
			tr := on(o.Begin.Add(time.Second), o.Begin.Add(2*time.Second))
			o.Alerts[workloadAlert] = &tr
		}, "before the onset"},
		{"the host's state before the onset", func(o *observation) {
			o.Host = trace{Eps: append([]episode{{From: o.Begin.Add(time.Second), To: o.Begin.Add(1500 * time.Millisecond)}}, o.Host.Eps...)}
		}, "before the onset"},
		{"on before the kernel saw the group at its limit, ahead of the onset", func(o *observation) {
			o.LimitMet = o.Onset.Add(-5 * time.Second)
			o.Host = trace{Eps: append([]episode{{From: o.LimitMet.Add(-time.Second), To: o.LimitMet.Add(time.Second)}}, o.Host.Eps...)}
		}, "on 1.0 s before the kernel saw its group at its limit"},
		{"a failed scrape", func(o *observation) { o.failed("scraping the observer", errTest) }, "looks of the watch failed"},
	} {
		t.Run("thrash: "+c.name, func(t *testing.T) {
			o := caught(t0)
			c.break_(o)
			assertJudged(t, o, c.want)
		})
	}
	for _, c := range []struct {
		name   string
		break_ func(o *observation)
		want   string
	}{
		{"the load never ran", func(o *observation) { o.Kernel = kernelCounts{} }, "did not do what its label says"},
		{"a critical alert", func(o *observation) {
			tr := on(o.Begin.Add(time.Second), o.Begin.Add(7*time.Second))
			o.Alerts[workloadAlert] = &tr
		}, "raised " + workloadAlert},
		{"a workload state held past its alert's hold", func(o *observation) {
			o.AnyWorkload = on(o.Begin.Add(time.Second), o.Begin.Add(7*time.Second))
		}, "held the workload detector"},
		{"the host state held past its alert's hold", func(o *observation) { o.Host = on(o.Begin, o.Begin.Add(5*time.Second)) }, "held the host detector"},
		{"a failed alerts read", func(o *observation) { o.failed("reading Prometheus's alerts", errTest) }, "looks of the watch failed"},
	} {
		t.Run("benign: "+c.name, func(t *testing.T) {
			o := benign(t0)
			c.break_(o)
			assertJudged(t, o, c.want)
		})
	}
	// What the table allows on a benign load: an informative alert, and a
	// state's blip below its alert's hold.
	o := benign(t0)
	o.AnyWorkload = on(o.Begin.Add(time.Second), o.Begin.Add(4*time.Second))
	info := on(o.Begin.Add(time.Second), o.Begin.Add(6*time.Second))
	o.Alerts["ThrashscopeProcessMajorFaults"] = &info
	if p := judge(testRules(), []*observation{o}); len(p) != 0 {
		t.Errorf("an info alert and a 3 s blip on a benign load judged as false alarms: %q", p)
	}
}

type testError string

func (e testError) Error() string { return string(e) }

const errTest = testError("connection refused")

func assertJudged(t *testing.T, o *observation, want string) {
	t.Helper()
	p := judge(testRules(), []*observation{o})
	if !strings.Contains(strings.Join(p, "\n"), want) {
		t.Errorf("judged %q; want a problem saying %q", p, want)
	}
}

// Every benign scenario states its floor, and every thrash none.
func TestEveryBenignLoadHasAFloor(t *testing.T) {
	thrashes, benigns := 0, 0
	for _, s := range scenarios {
		switch {
		case s.thrash && s.floor != (floor{}):
			t.Errorf("%s: a thrash with a floor", s.name)
		case !s.thrash && s.floor == (floor{}):
			t.Errorf("%s: a benign load with no floor: its no-alarm would hold even if it never ran", s.name)
		}
		if s.quick && s.thrash {
			thrashes++
		} else if s.quick {
			benigns++
		}
	}
	if thrashes < 1 || benigns < 2 {
		t.Errorf("make test's short form has %d thrashes and %d benign loads; want at least 1 and 2", thrashes, benigns)
	}
}

// A rule that holds longer than a thrash was watched past its onset is not
// measurable there, not missed.
func TestCellSaysWhatCannotBeMeasured(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	o := caught(t0)
	o.WatchedTo = o.Onset.Add(3 * time.Minute)
	if got := cell(o, "NodeMajorFaultsBaseline", 15*time.Minute); got != "not measurable in 3 min" {
		t.Errorf("a 15-minute hold on a 3-minute watch: %q", got)
	}
	if got := cell(o, "OomdPressureBaseline", 30*time.Second); got != "missed" {
		t.Errorf("a 30 s hold on a 3-minute watch: %q", got)
	}
	if got := cell(o, hostAlert, 5*time.Second); got != "8.0 s" {
		t.Errorf("the host alert 8 s after the onset: %q", got)
	}
}

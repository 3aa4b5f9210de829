package policy

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const mib = 1 << 20

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func kinds(as []Action) []string {
	var out []string
	for _, a := range as {
		out = append(out, string(a.Kind)+" "+string(rune('0'+a.Consumer)))
	}
	return out
}

// The registry holds each policy once, with what it needs of a run: the
// run's levers are built from this and nothing else.
func TestTheRegistryHoldsEachPolicy(t *testing.T) {
	want := []struct {
		name  string
		needs Needs
	}{
		{None, Needs{}},
		{"binpack", Needs{Ticks: true, Freezer: true, OwnMemory: true}},
		{"calmdown", Needs{Ticks: true, Freezer: true}},
		{"tpf", Needs{Ticks: true, Protection: true}},
	}
	got := Registered()
	if len(got) != len(want) {
		t.Fatalf("the registry holds %v, want %d policies", Names(), len(want))
	}
	for i, w := range want {
		if got[i].Name != w.name || got[i].Needs != w.needs || got[i].Summary == "" || got[i].New == nil {
			t.Errorf("policy %d: %s %+v (summary %q), want %s %+v", i, got[i].Name, got[i].Needs, got[i].Summary, w.name, w.needs)
		}
	}
	if h := Help(); !strings.HasPrefix(h, "none (Linux as it is), binpack (") || !strings.Contains(h, " or tpf (") {
		t.Errorf("Help() = %q", h)
	}
	if n := NeedsOf("lru"); n != (Needs{}) {
		t.Errorf("an unknown policy needs %+v", n)
	}
}

func TestNewKnowsEveryPolicy(t *testing.T) {
	for _, name := range Names() {
		if _, err := New(name); err != nil {
			t.Errorf("New(%q): %v", name, err)
		}
	}
	if _, err := New("lru"); err == nil {
		t.Error("an unknown policy was accepted")
	}
	p, _ := New(None)
	if a := p.Step(Tick{Thrashing: true, Consumers: []Consumer{{Index: 0, HighFault: true}}}); a != nil {
		t.Errorf("none acted: %v", a)
	}
}

// TPF (Jiang and Zhang, 2001): while thrashing, protect the high-fault
// consumer with the least (demand − RSS), one at a time; release it when
// its faults fall below PF_Low or CPU recovers past CPU_High.
func TestTPFDecisions(t *testing.T) {
	pair := func(rss0, rss1 int64, rate0, rate1 float64) []Consumer {
		return []Consumer{
			{Index: 0, DemandBytes: 200 * mib, ResidentBytes: rss0, SwapInRate: rate0, HighFault: rate0 > 10},
			{Index: 1, DemandBytes: 200 * mib, ResidentBytes: rss1, SwapInRate: rate1, HighFault: rate1 > 10},
		}
	}
	steps := []struct {
		name string
		tick Tick
		want []string
	}{
		{"monitoring only: nothing", Tick{Thrashing: false, CPUBusyPercent: 30, Consumers: pair(120*mib, 130*mib, 500, 500)}, nil},
		{"thrashing: protect the one nearer its demand", Tick{Thrashing: true, CPUBusyPercent: 30, Consumers: pair(120*mib, 130*mib, 500, 500)}, []string{"protect 1"}},
		{"protected, still faulting: hold", Tick{Thrashing: true, CPUBusyPercent: 30, Consumers: pair(100*mib, 190*mib, 600, 40)}, nil},
		{"its faults fall below PF_Low: release", Tick{Thrashing: true, CPUBusyPercent: 50, Consumers: pair(60*mib, 200*mib, 700, 0.5)}, []string{"release 1"}},
		{"thrashing, 1 no longer high-fault: protect 0", Tick{Thrashing: true, CPUBusyPercent: 30, Consumers: pair(60*mib, 200*mib, 700, 0.5)}, []string{"protect 0"}},
		{"CPU recovers past CPU_High: release", Tick{Thrashing: true, CPUBusyPercent: 85, Consumers: pair(150*mib, 100*mib, 30, 30)}, []string{"release 0"}},
		{"thrashing with no high-fault consumer: nothing", Tick{Thrashing: true, CPUBusyPercent: 30, Consumers: pair(150*mib, 100*mib, 0, 0)}, nil},
		{"protect 0 again", Tick{Thrashing: true, CPUBusyPercent: 30, Consumers: pair(150*mib, 100*mib, 30, 30)}, []string{"protect 0"}},
		{"the protected one ends: release", Tick{Thrashing: true, CPUBusyPercent: 30, Consumers: pair(150*mib, 100*mib, 30, 30)[1:]}, []string{"release 0"}},
	}
	p := NewTPF(DefaultTPF())
	for _, s := range steps {
		if got := kinds(p.Step(s.tick)); !slices.Equal(got, s.want) {
			t.Errorf("%s: %v, want %v", s.name, got, s.want)
		}
	}
}

func sized(sizes ...int64) []Consumer {
	var cs []Consumer
	for i, s := range sizes {
		// Its RSS counts file pages it shares too: not its size.
		cs = append(cs, Consumer{Index: i, ResidentBytes: s*mib/2 + 5*mib, OwnResidentBytes: s * mib / 2, SwapBytes: s * mib / 2})
	}
	return cs
}

// Pack: ceil(total / capacity) bins, first fit largest first, a leftover
// into the least filled bin.
func TestPack(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sizes    []int64
		capacity int64
		want     [][]int
	}{
		{"all fit in one", []int64{8, 8, 8}, 96, [][]int{{0, 1, 2}}},
		// SYN8: 17 × 8 MB in 96 MB bins: 136/96 → 2 bins, 12 in the first.
		{"syn8", []int64{8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8}, 96, [][]int{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {12, 13, 14, 15, 16}}},
		{"largest first", []int64{10, 60, 30, 50}, 96, [][]int{{1, 2}, {3, 0}}},
		// 3 × 60 in 96: 2 bins by the total, the third is a leftover and
		// goes to the least filled (both 60: the first).
		{"leftover to the least filled", []int64{60, 60, 60}, 96, [][]int{{0, 2}, {1}}},
		{"none", nil, 96, nil},
	} {
		got := Pack(sized(tc.sizes...), tc.capacity*mib)
		if !slices.EqualFunc(got, tc.want, slices.Equal) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// BinPack round-robins the bins, slices proportional to their fill, and
// thaws everything once it all fits.
func TestBinPackDecisions(t *testing.T) {
	p := NewBinPack(BinPackConfig{Usable: 0.75, Quantum: time.Second})
	limit := int64(128 * mib) // bins of 96 MiB
	cs := sized(60, 60, 30)   // 150 MiB: two bins, {0, 2} (90 MiB) and {1} (60 MiB)
	tick := func(at time.Duration, cs []Consumer) Tick {
		return Tick{Now: t0.Add(at), LimitBytes: limit, Consumers: cs}
	}
	steps := []struct {
		name string
		at   time.Duration
		cs   []Consumer
		want []string
	}{
		{"first bin runs, the other is frozen", 0, cs, []string{"freeze 1"}},
		{"inside the slice (90/96 of 1 s): nothing", 900 * time.Millisecond, cs, nil},
		{"switch: bin 2 runs", 940 * time.Millisecond, cs, []string{"thaw 1", "freeze 0", "freeze 2"}},
		{"bin 2's slice is half a second at least (60/96 of 1 s = 625 ms)", 1500 * time.Millisecond, cs, nil},
		{"round over: repacked, bin 1 again", 1600 * time.Millisecond, cs, []string{"thaw 0", "thaw 2", "freeze 1"}},
		{"consumer 1 ended, all fit: thaw the rest", 1700 * time.Millisecond, []Consumer{cs[0], cs[2]}, nil},
	}
	for _, s := range steps {
		if got := kinds(p.Step(tick(s.at, s.cs))); !slices.Equal(got, s.want) {
			t.Errorf("%s: %v, want %v", s.name, got, s.want)
		}
	}
	// A consumer that ends mid-round is not frozen at the next switch.
	p = NewBinPack(BinPackConfig{Usable: 0.75, Quantum: time.Second})
	four := sized(60, 60, 30, 30) // bins {0, 2} and {1, 3}
	p.Step(tick(0, four))         // freeze 1, 3
	if got := kinds(p.Step(tick(time.Second, []Consumer{four[1], four[2], four[3]}))); !slices.Equal(got, []string{"thaw 1", "thaw 3", "freeze 2"}) {
		t.Errorf("switch after consumer 0 ended: %v, want thaw 1, thaw 3, freeze 2 (and nothing for 0)", got)
	}
	// Everything fits once one ends while another is frozen: it is thawed.
	p = NewBinPack(BinPackConfig{Usable: 0.75, Quantum: time.Second})
	p.Step(tick(0, cs))
	if got := kinds(p.Step(tick(100*time.Millisecond, []Consumer{cs[1], cs[2]}))); !slices.Equal(got, []string{"thaw 1"}) {
		t.Errorf("consumer 0 ended, the rest fits: %v, want thaw 1", got)
	}
}

// CalmDown: while memory is low and paging high, stop the most recently
// activated consumer, one a tick, one always left running; each returns
// after 20 s, or when the pressure ends.
func TestCalmDownDecisions(t *testing.T) {
	p := NewCalmDown(DefaultCalmDown())
	limit := int64(1024 * mib)
	cs := []Consumer{
		{Index: 0, Since: t0, SwapInRate: 400},
		{Index: 1, Since: t0.Add(30 * time.Second), SwapInRate: 400},
		{Index: 2, Since: t0.Add(60 * time.Second), SwapInRate: 400},
	}
	low, plenty := int64(32*mib), int64(300*mib)
	steps := []struct {
		name string
		at   time.Duration
		free int64
		rate float64
		want []string
	}{
		{"memory plenty: nothing", 0, plenty, 400, nil},
		{"memory low, paging low: nothing", time.Second, low, 1, nil},
		{"low and high: stop the latest", 2 * time.Second, low, 400, []string{"freeze 2"}},
		{"still: stop the next latest", 3 * time.Second, low, 400, []string{"freeze 1"}},
		{"still: one is left running", 4 * time.Second, low, 400, nil},
		{"20 s on: 2 returns", 22 * time.Second, low, 400, []string{"thaw 2"}},
		{"pressure ends: 1 returns", 23 * time.Second, plenty, 400, []string{"thaw 1"}},
	}
	for _, s := range steps {
		for i := range cs {
			cs[i].SwapInRate = s.rate
		}
		got := kinds(p.Step(Tick{Now: t0.Add(s.at), LimitBytes: limit, FreeBytes: s.free, Consumers: cs}))
		if !slices.Equal(got, s.want) {
			t.Errorf("%s: %v, want %v", s.name, got, s.want)
		}
	}
}

// A policy's own gauges: each registered one it reports, and it reports
// only those; the names a metric can end in.
func TestEachPolicyReportsItsGauges(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	for _, r := range Registered() {
		p := r.New()
		rep, ok := p.(Reporter)
		if ok != (len(r.Gauges) > 0) {
			t.Errorf("%s: registers %d gauges, reports them: %v", r.Name, len(r.Gauges), ok)
			continue
		}
		if !ok {
			continue
		}
		got := rep.Gauges()
		for _, g := range r.Gauges {
			if !valid.MatchString(g.Name) || g.Help == "" {
				t.Errorf("%s: gauge %q (help %q): want a metric name's part and a help", r.Name, g.Name, g.Help)
			}
			if _, ok := got[g.Name]; !ok {
				t.Errorf("%s: reports no %s", r.Name, g.Name)
			}
			delete(got, g.Name)
		}
		for name := range got {
			t.Errorf("%s: reports %s, which it does not register", r.Name, name)
		}
	}
	if names := AllGauges(); len(names) != 2 || names[0].Name != "bin" || names[1].Name != "bins" {
		t.Errorf("AllGauges() = %+v, want binpack's bin and bins", names)
	}
}

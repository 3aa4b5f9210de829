package run

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/swapdev"
)

func TestPresetsMatchThePaper(t *testing.T) {
	want := map[string]struct {
		w            int
		sleep, inter time.Duration
	}{
		"e1": {1_000, 100 * time.Millisecond, 30 * time.Second},
		"e2": {10_000, 100 * time.Millisecond, 30 * time.Second},
		"e3": {10_000, time.Second, 30 * time.Second},
		"e4": {10_000, 100 * time.Millisecond, time.Second},
		// Fig 12, the paper's stability run, repeated three times there.
		"fig12": {10_000, 100 * time.Millisecond, 10 * time.Second},
	}
	for name, w := range want {
		r, err := Resolve(Spec{Preset: name})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.Consumers != 25 || r.SizeBytes != pageRound(100e6) {
			t.Errorf("%s: N=%d S=%d, want 25 × 100 MB", name, r.Consumers, r.SizeBytes)
		}
		if r.WritesPerCycle != w.w || r.Sleep.D() != w.sleep || r.Interval.D() != w.inter {
			t.Errorf("%s: W=%d t_s=%s t_c=%s, want %d %s %s", name, r.WritesPerCycle, r.Sleep, r.Interval, w.w, w.sleep, w.inter)
		}
		if r.MemoryLimitBytes != 1<<30 || r.LeadIn.D() != 10*time.Second || r.Backing != BackingAnon || r.Fill != FillRandom {
			t.Errorf("%s: limit=%d lead_in=%s backing=%s fill=%s", name, r.MemoryLimitBytes, r.LeadIn, r.Backing, r.Fill)
		}
	}
	for _, p := range Presets() {
		if _, err := Resolve(Spec{Preset: p.Name}); err != nil {
			t.Errorf("preset %s does not validate: %v", p.Name, err)
		}
	}
}

func TestScaleMultipliesSizesNotTimes(t *testing.T) {
	// DESIGN.md: {"preset":"e4","scale":0.1} is a 60 s thrash of 25 × 10 MB in a 100 MiB cgroup.
	r, err := Resolve(Spec{Preset: "e4", Scale: ptr(0.1)})
	if err != nil {
		t.Fatal(err)
	}
	if r.SizeBytes != pageRound(10e6) || r.MemoryLimitBytes != pageRound(0.1*(1<<30)) {
		t.Errorf("S=%d limit=%d", r.SizeBytes, r.MemoryLimitBytes)
	}
	if r.Duration() != 60*time.Second || r.Interval.D() != time.Second {
		t.Errorf("duration %s interval %s", r.Duration(), r.Interval)
	}
	if r.SizeBytes%4096 != 0 || r.MemoryLimitBytes%4096 != 0 {
		t.Error("sizes are not whole pages")
	}
}

func TestScaleKeepsThePagesTouchedPerCycle(t *testing.T) {
	r, err := Resolve(Spec{Preset: "e4", Scale: ptr(0.1)})
	if err != nil {
		t.Fatal(err)
	}
	if r.WritesPerCycle != 1_000 {
		t.Errorf("W=%d at scale 0.1, want 1,000", r.WritesPerCycle)
	}
	// W scales with S: the fraction of a consumer's pages a cycle touches
	// is the paper's at every scale.
	for _, c := range []struct {
		preset string
		scale  float64
	}{{"e1", 0.1}, {"e1", 0.5}, {"e2", 0.1}, {"e2", 2}, {"fig12", 0.25}} {
		full, err := Resolve(Spec{Preset: c.preset})
		if err != nil {
			t.Fatal(err)
		}
		scaled, err := Resolve(Spec{Preset: c.preset, Scale: ptr(c.scale)})
		if err != nil {
			t.Fatal(err)
		}
		pages := func(r Resolved) float64 { return float64(r.WritesPerCycle) / float64(r.SizeBytes/4096) }
		if got, want := pages(scaled), pages(full); math.Abs(got-want)/want > 0.01 {
			t.Errorf("%s at scale %g: W/pages %.4f, at scale 1 %.4f", c.preset, c.scale, got, want)
		}
	}
	// A W the client gives is kept: the old meaning stays reachable.
	r, err = Resolve(Spec{Preset: "e4", Scale: ptr(0.1), WritesPerCycle: ptr(10_000)})
	if err != nil || r.WritesPerCycle != 10_000 {
		t.Errorf("explicit W at scale 0.1: %d, %v", r.WritesPerCycle, err)
	}
	// The smallest W is 1, and fill (no W) stays without one.
	r, err = Resolve(Spec{Preset: "e1", Scale: ptr(0.0001), SizeBytes: ptr(int64(100_000_000_000)), MemoryLimitBytes: ptr(int64(1 << 40))})
	if err != nil || r.WritesPerCycle != 1 {
		t.Errorf("W at a tiny scale: %d, %v", r.WritesPerCycle, err)
	}
	r, err = Resolve(Spec{Preset: PresetFill, Scale: ptr(0.5)})
	if err != nil || r.WritesPerCycle != 0 {
		t.Errorf("fill at scale 0.5: W=%d, %v", r.WritesPerCycle, err)
	}
}

func TestOverridesWin(t *testing.T) {
	d := Duration(50 * time.Millisecond)
	r, err := Resolve(Spec{Preset: "e1", Consumers: ptr(3), Sleep: &d, Backing: ptr(BackingFile), Fill: ptr(FillZero)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Consumers != 3 || r.Sleep != d || r.Backing != BackingFile || r.Fill != FillZero || r.WritesPerCycle != 1000 {
		t.Errorf("%+v", r)
	}
}

// cycles turns a timed run into one of fixed work: the master lets it run
// to MaxRunDuration instead of the plan's end, and the schedule's starts
// are the paper's.
func TestCyclesMakeWork(t *testing.T) {
	s, err := DecodeSpec([]byte(`{"preset":"e4","scale":0.1,"cycles":200}`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Resolve(s)
	if err != nil {
		t.Fatal(err)
	}
	if r.Cycles != 200 || r.Deadline() != MaxRunDuration || r.Slot(3).Start != 13*time.Second {
		t.Errorf("cycles %d, deadline %s, consumer 3 starts at %s; want 200, %s, 13s", r.Cycles, r.Deadline(), r.Slot(3).Start, MaxRunDuration)
	}
	timed, _ := Resolve(Spec{Preset: "e4"})
	if timed.Cycles != 0 || timed.Deadline() != timed.Duration() {
		t.Errorf("a timed run: cycles %d, deadline %s, want 0 and its plan %s", timed.Cycles, timed.Deadline(), timed.Duration())
	}
	if b, _ := json.Marshal(timed); strings.Contains(string(b), "cycles") {
		t.Errorf("a timed run's resolved spec names cycles: %s", b)
	}
	// The work presets. cycles is 1 to 10,000,000 when given, as the
	// README and the OpenAPI say: 0 is no work, not a timed run.
	for name, want := range map[string]int64{"syn8": 1_000, "pair": 1_500} {
		r, err := Resolve(Spec{Preset: name})
		if err != nil || r.Cycles != want {
			t.Errorf("%s: cycles %d (%v), want %d", name, r.Cycles, err, want)
		}
	}
	for _, p := range []string{"syn8", "e4"} {
		var fe *FieldError
		if _, err := Resolve(Spec{Preset: p, Cycles: ptr(int64(0))}); !errors.As(err, &fe) || fe.Field != "cycles" || !strings.Contains(fe.Msg, "leave cycles out for a timed run") {
			t.Errorf("%s with cycles 0: %v; want it refused, naming cycles", p, err)
		}
	}
	// pair is TPF's LU + LU: two consumers each needing about three
	// quarters of the limit, a third short of their demand.
	p, _ := Resolve(Spec{Preset: "pair"})
	if short := 1 - float64(p.MemoryLimitBytes)/float64(p.Demand()); p.Consumers != 2 || short < 0.30 || short > 0.36 {
		t.Errorf("pair: %d consumers, %.0f %% short, want 2 and about TPF's 35 %%", p.Consumers, 100*short)
	}
}

// swap_device is none unless asked; a profile resolves to its limits.
func TestSwapDevice(t *testing.T) {
	r, err := Resolve(Spec{Preset: "e4"})
	if err != nil || r.SwapDevice != (swapdev.Spec{Profile: swapdev.None}) {
		t.Errorf("default swap device %+v (%v), want none", r.SwapDevice, err)
	}
	s, err := DecodeSpec([]byte(`{"preset":"e2","swap_device":"hdd-2013"}`))
	if err != nil {
		t.Fatal(err)
	}
	if r, err = Resolve(s); err != nil || r.SwapDevice.Profile != swapdev.HDD2013 || r.SwapDevice.ReadIOPS != 120 || r.SwapDevice.WriteIOPS != 120 {
		t.Errorf("hdd-2013: %+v (%v)", r.SwapDevice, err)
	}
	b, _ := json.Marshal(r)
	if !strings.Contains(string(b), `"swap_device":{"profile":"hdd-2013","read_iops":120,"write_iops":120}`) {
		t.Errorf("resolved: %s", b)
	}
	// A record from before swap devices ran on none.
	rec := Record{Spec: r}
	rec.Spec.SwapDevice = swapdev.Spec{}
	rec.Normalize()
	if rec.Spec.SwapDevice.Profile != swapdev.None {
		t.Errorf("an old record's device: %+v", rec.Spec.SwapDevice)
	}
	var fe *FieldError
	if _, err := DecodeSpec([]byte(`{"preset":"e4","swap_device":{"read_iops":0}}`)); !errors.As(err, &fe) || fe.Field != "swap_device" || !strings.Contains(err.Error(), "swap_device: read_iops: 0: want a whole number of I/Os a second from 1 to 4294967294 (0 or less") {
		t.Errorf("read_iops 0: %v", err)
	}
}

func TestBadSpecsNameTheField(t *testing.T) {
	cases := []struct {
		body, field string
	}{
		{`{}`, "preset"},
		{`{"preset":"e9"}`, "preset"},
		{`{"preset":"e4","consumers":0}`, "consumers"},
		{`{"preset":"e4","consumers":513}`, "consumers"},
		{`{"preset":"e4","consumers":"many"}`, "consumers"},
		{`{"preset":"e4","size_bytes":1000}`, "size_bytes"},
		{`{"preset":"e4","scale":0}`, "scale"},
		{`{"preset":"e4","scale":-1}`, "scale"},
		{`{"preset":"e4","sleep":"soon"}`, "sleep"},
		{`{"preset":"e4","sleep":100}`, "sleep"},
		{`{"preset":"e4","interval":"1ns"}`, "interval"},
		{`{"preset":"e1","interval":"5m"}`, "interval"}, // 10s + 2·25·5m > 4h
		{`{"preset":"e4","backing":"tmpfs"}`, "backing"},
		{`{"preset":"e4","fill":"ones"}`, "fill"},
		{`{"preset":"e4","memory_limit_bytes":1024}`, "memory_limit_bytes"},
		{`{"preset":"e4","writes_per_cycle":0}`, "writes_per_cycle"},
		{`{"preset":"e4","repeats":3}`, "repeats"},
		{`{"preset":"e4","cycles":-5}`, "cycles"},
		{`{"preset":"e4","cycles":0}`, "cycles"},
		{`{"preset":"e4","cycles":10000001}`, "cycles"},
		{`{"preset":"e4","cycles":"many"}`, "cycles"},
		{`{"preset":"fill","cycles":10}`, "cycles"},
		{`{"preset":"e4","policy":"lru"}`, "policy"},
		{`{"preset":"e4","policy":""}`, "policy"},
		{`{"preset":"e4","policy":1}`, "policy"},
		{`{"preset":"fill","policy":"binpack"}`, "policy"},
		{`{"preset":"fill","repeats":0}`, "repeats"},
		{`{"preset":"fill","backing":"file"}`, "backing"},
		{`{"preset":"e4","swap_device":"floppy"}`, "swap_device"},
		{`{"preset":"e4","swap_device":{"read_iops":0}}`, "swap_device"},
		{`{"preset":"e4","swap_device":{"write_bps":-1}}`, "swap_device"},
		{`{"preset":"e4","swap_device":{"read_iops":4294967295}}`, "swap_device"},
		{`{"preset":"e4","swap_device":{"iops":5}}`, "swap_device"},
		{`{"preset":"e4","swap_device":5}`, "swap_device"},
		{`{"preset":"e4","backing":"file","swap_device":"hdd-2013"}`, "swap_device"},
		{`{"preset":"e4","colour":"red"}`, "colour"},
		{`{"preset":"e4"} {}`, "body"},
		{`[1,2]`, "body"},
		// Overflow: an interval that wraps the run's end past int64, and a
		// demand that wraps negative, both passed once.
		{`{"preset":"e4","consumers":1,"interval":"2562047h","size_bytes":1048576,"memory_limit_bytes":1073741824,"lead_in":"1h"}`, "interval"},
		{`{"preset":"e4","consumers":512,"size_bytes":36028797018959872}`, "size_bytes"},
		{`{"preset":"e4","size_bytes":-4096}`, "size_bytes"},
		{`{"preset":"e4","memory_limit_bytes":-1}`, "memory_limit_bytes"},
		{`{"preset":"e4","memory_limit_bytes":9223372036854775807}`, "memory_limit_bytes"},
		{`{"preset":"e4","scale":100,"size_bytes":1099511627776}`, "size_bytes"},
		{`{"preset":"e4","consumers":1,"consumers":512}`, "body"}, // given twice
	}
	for _, c := range cases {
		s, err := DecodeSpec([]byte(c.body))
		if err == nil {
			_, err = Resolve(s)
		}
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: got %v, want a FieldError", c.body, err)
			continue
		}
		if !strings.Contains(fe.Field, c.field) {
			t.Errorf("%s: error names %q (%v), want %q", c.body, fe.Field, err, c.field)
		}
	}
	// A negative limit is named as given, not as "0 after scale".
	s, _ := DecodeSpec([]byte(`{"preset":"e4","memory_limit_bytes":-1}`))
	if _, err := Resolve(s); err == nil || !strings.Contains(err.Error(), "-1: want 1 to") {
		t.Errorf("memory_limit_bytes -1: %v", err)
	}
	// What an error echoes of the input is short.
	long := strings.Repeat("x", 60000)
	for _, body := range []string{`{"preset":"` + long + `"}`, `{"` + long + `":1}`, `{"preset":"e4","backing":"` + long + `"}`, `{"preset":"e4","sleep":"` + long + `"}`} {
		s, err := DecodeSpec([]byte(body))
		if err == nil {
			_, err = Resolve(s)
		}
		if err == nil || len(err.Error()) > 300 {
			t.Errorf("%.30s…: error of %d bytes: %.80s", body, len(fmt.Sprint(err)), err)
		}
	}
}

// Every spec that resolves keeps its schedule in order and its demand
// positive: no field, however large, wraps a product or a sum.
func TestResolvedSpecsDoNotOverflow(t *testing.T) {
	for _, body := range []string{
		`{"preset":"e1","consumers":512,"interval":"14s","lead_in":"1h","sleep":"1m","size_bytes":1099511627776,"memory_limit_bytes":70368744177664}`,
		`{"preset":"e4","consumers":1,"interval":"3h","lead_in":"1h"}`,
	} {
		s, err := DecodeSpec([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		r, err := Resolve(s)
		if err != nil {
			continue // refused is fine; wrapped is not
		}
		if r.Demand() <= 0 || r.Duration() <= 0 || r.Duration() > MaxRunDuration {
			t.Errorf("%s: demand %d, duration %s", body, r.Demand(), r.Duration())
		}
	}
}

func TestScheduleMatchesThePaper(t *testing.T) {
	// At N=25 and t_c=30 s, all consumers are active in [730 s, 790 s] and
	// the run lasts 1510 s; at t_c=1 s it lasts 60 s.
	e2, _ := Resolve(Spec{Preset: "e2"})
	from, to := e2.Plateau()
	if from != 730*time.Second || to != 790*time.Second {
		t.Errorf("e2 plateau [%s, %s], want [730s, 790s]", from, to)
	}
	if e2.Duration() != 1510*time.Second {
		t.Errorf("e2 lasts %s", e2.Duration())
	}
	if e2.ActiveAt(760*time.Second) != 25 || e2.ActiveAt(729*time.Second) != 24 || e2.ActiveAt(5*time.Second) != 0 || e2.ActiveAt(1510*time.Second) != 0 {
		t.Errorf("active: %d %d %d %d", e2.ActiveAt(760*time.Second), e2.ActiveAt(729*time.Second), e2.ActiveAt(5*time.Second), e2.ActiveAt(1510*time.Second))
	}
	e4, _ := Resolve(Spec{Preset: "e4"})
	if e4.Duration() != 60*time.Second {
		t.Errorf("e4 lasts %s", e4.Duration())
	}
	// The paper's Fig 12 spans 510 s.
	if fig12, _ := Resolve(Spec{Preset: "fig12"}); fig12.Duration() != 510*time.Second {
		t.Errorf("fig12 lasts %s, want 510s", fig12.Duration())
	}
	s := e4.Slot(7)
	if s.Start != 17*time.Second || s.End != 43*time.Second {
		t.Errorf("e4 consumer 7: %+v", s)
	}
	// 1 GiB holds 10 consumers of 100 MB; the 11th (index 10) starts the overcommit.
	if on, ok := e4.Onset(); !ok || on != 20*time.Second {
		t.Errorf("e4 onset %s %v, want 20s", on, ok)
	}
	small, _ := Resolve(Spec{Preset: "e4", Consumers: ptr(2)})
	if _, ok := small.Onset(); ok {
		t.Error("2 × 100 MB in 1 GiB never overcommits")
	}
}

func TestBudget(t *testing.T) {
	const gb = 1 << 30
	host := Host{MemTotalBytes: 24 * gb, MemAvailableBytes: 23 * gb, SwapTotalBytes: 4 * gb, SwapFreeBytes: 4 * gb, DiskFreeBytes: 80 * gb}
	noSwap := host
	noSwap.SwapTotalBytes, noSwap.SwapFreeBytes = 0, 0
	cases := []struct {
		name string
		spec Spec
		host Host
		want string // "" = allowed
	}{
		{"e4 at 0.1 with swap", Spec{Preset: "e4", Scale: ptr(0.1)}, host, ""},
		{"e4 at 1.0 with swap", Spec{Preset: "e4"}, host, ""},
		{"anon without swap", Spec{Preset: "e4", Scale: ptr(0.1)}, noSwap, "no swap configured"},
		{"anon without swap that fits", Spec{Preset: "e4", Consumers: ptr(2)}, noSwap, ""},
		{"file without swap", Spec{Preset: "e4", Scale: ptr(0.1), Backing: ptr(BackingFile)}, noSwap, ""},
		{"beyond swap", Spec{Preset: "e4", Scale: ptr(3.0)}, host, "would OOM"},
		{"limit beyond the host", Spec{Preset: "e4", MemoryLimitBytes: ptr(int64(23 * gb))}, host, "more than this host can give"},
		{"file beyond the disk", Spec{Preset: "e4", Backing: ptr(BackingFile)}, Host{MemTotalBytes: 24 * gb, MemAvailableBytes: 23 * gb, DiskFreeBytes: gb}, "disk"},
		{"fill", Spec{Preset: "fill", Scale: ptr(0.1)}, host, ""},
	}
	for _, c := range cases {
		r, err := Resolve(c.spec)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		err = r.Check(c.host)
		var ue *UnsafeError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && !errors.As(err, &ue):
			t.Errorf("%s: got %v, want an UnsafeError", c.name, err)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: %q does not say %q", c.name, err, c.want)
		}
	}
}

func TestSize(t *testing.T) {
	for in, want := range map[int64]string{512: "512 B", 4096: "4 KiB", 100 << 20: "100 MiB", 1536 << 20: "1.5 GiB"} {
		if got := size(in); got != want {
			t.Errorf("size(%d) = %q, want %q", in, got, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// FuzzDecodeSpec: a body either fails with a FieldError that is short, or
// resolves to a spec whose arithmetic stays in range.
func FuzzDecodeSpec(f *testing.F) {
	for _, s := range []string{
		`{"preset":"e4","scale":0.1}`,
		`{"preset":"e1","consumers":512,"interval":"14s","lead_in":"1h"}`,
		`{"preset":"e4","consumers":1,"interval":"2562047h","size_bytes":1048576,"memory_limit_bytes":1073741824,"lead_in":"1h"}`,
		`{"preset":"e4","consumers":512,"size_bytes":36028797018959872}`,
		`{"preset":"fill","repeats":20,"size_bytes":1099511627776}`,
		`{"preset":"syn8","scale":100,"memory_limit_bytes":-1}`,
		`{"preset":"e4","preset":"e1"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSpec(b)
		if err == nil {
			_, err = Resolve(s)
			if err == nil {
				r, _ := Resolve(s)
				if r.Demand() <= 0 || r.Duration() < 0 || r.Duration() > MaxRunDuration || r.MemoryLimitBytes <= 0 {
					t.Fatalf("%s resolved to demand %d, duration %s, limit %d", b, r.Demand(), r.Duration(), r.MemoryLimitBytes)
				}
				return
			}
		}
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Fatalf("%q: %v is not a FieldError", b, err)
		}
		if len(err.Error()) > 400 {
			t.Fatalf("error of %d bytes", len(err.Error()))
		}
	})
}

// A timed run waits OverrunGrace past its plan on the host's own swap; on
// an emulated device, the time the device takes to read every consumer's
// region back once (a late consumer there is still progressing), never
// past MaxRunDuration.
func TestGraceFollowsTheDevice(t *testing.T) {
	cases := []struct {
		spec string
		want time.Duration
	}{
		{`{"preset":"e2"}`, OverrunGrace},
		// 25 × 24,414 pages at 120 reads a second.
		{`{"preset":"e2","swap_device":"hdd-2013"}`, 5086 * time.Second},
		// 3,000 reads a second binds before 125 MiB/s.
		{`{"preset":"e2","swap_device":"cloud-3000"}`, 203 * time.Second},
		// 2.5 GB at 100 kB/s passes the 4 h bound: capped at what is left.
		{`{"preset":"e2","swap_device":{"read_bps":100000}}`, MaxRunDuration - 1510*time.Second},
		// A device fast enough keeps the floor.
		{`{"preset":"e4","scale":0.1,"swap_device":{"read_iops":100000}}`, OverrunGrace},
	}
	for _, c := range cases {
		var s Spec
		if err := json.Unmarshal([]byte(c.spec), &s); err != nil {
			t.Fatal(err)
		}
		r, err := Resolve(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Grace().Truncate(time.Second); got != c.want {
			t.Errorf("%s: grace %s, want %s", c.spec, got, c.want)
		}
	}
}

// The registry holds each preset once, by name, with the shape the run
// side carries out; nothing else names a preset to choose how.
func TestTheRegistryHoldsEachPreset(t *testing.T) {
	want := map[string]Shape{"e1": ShapeTimed, "e2": ShapeTimed, "e3": ShapeTimed, "e4": ShapeTimed, "fig12": ShapeTimed,
		"fill": ShapeFill, "pair": ShapeWork, "syn8": ShapeWork}
	names := PresetNames()
	if !slices.IsSorted(names) || len(names) != len(want) {
		t.Fatalf("the registry holds %v, want the %d presets by name", names, len(want))
	}
	for _, p := range Presets() {
		if p.Spec.Shape() != want[p.Name] || p.Source == "" || p.Description == "" {
			t.Errorf("%s: shape %d, source %q, want shape %d and a source and description", p.Name, p.Spec.Shape(), p.Source, want[p.Name])
		}
	}
	if h := PresetHelp(); h != "e1, e2, e3, e4, fig12 (Maziero et al., 2013), fill (seed 002), pair (Jiang and Zhang, 2001) or syn8 (Reuven and Wiseman, 2006)" {
		t.Errorf("PresetHelp() = %q", h)
	}
	// A timed preset given cycles is a run of fixed work; the fill stays a fill.
	r, err := Resolve(Spec{Preset: "e4", Scale: ptr(0.1), Cycles: ptr(int64(10))})
	if err != nil || r.Shape() != ShapeWork {
		t.Errorf("e4 with cycles: shape %d, %v", r.Shape(), err)
	}
}

// A spec's settings are checked against the rest of it, each refusal
// naming the field and the fix.
func TestSettingsAgainstTheSpec(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"preset":"e4","scale":0.1,"settings":{"swap":"zram"}}`, ""},
		{`{"preset":"e4","scale":0.1,"settings":{"memory_high":67108864}}`, ""},
		{`{"preset":"e4","scale":0.1,"backing":"file","settings":{"swap":"disk"}}`, "settings: swap: backing=file"},
		{`{"preset":"e4","scale":0.1,"swap_device":"hdd-2013","settings":{"swap":"zram"}}`, "zram is memory"},
		{`{"preset":"e4","scale":0.1,"settings":{"memory_high":209715200}}`, "not below the run's memory limit"},
		{`{"preset":"e4","scale":0.1,"settings":{"swap":"zswap","zswap":"on"}}`, "leave zswap out"},
		{`{"preset":"e4","settings":{"swap":"nvme"}}`, `settings: swap: "nvme"; want "disk", "zram" or "zswap"`},
		{`{"preset":"e4","settings":{"swapiness":60}}`, `settings: "swapiness" is not a setting`},
		{`{"preset":"e4","settings":[]}`, "settings: want a JSON object"},
	} {
		s, err := DecodeSpec([]byte(c.body))
		if err == nil {
			_, err = Resolve(s)
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.body, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error with %q", c.body, err, c.want)
		}
	}
}

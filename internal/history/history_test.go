package history

import (
	"math"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/row"
	"github.com/thrashscope/thrashscope/internal/sampler"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestCapacity(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		want     int
	}{
		{time.Second, 900},
		{500 * time.Millisecond, 1800},
		{100 * time.Millisecond, MaxPoints}, // 9,000 capped
		{7 * time.Second, 129},              // rounded up, so the span is covered
		{time.Minute, 15},
		{time.Hour, 2},
		{0, 900}, // the default interval
	} {
		if got := Capacity(tc.interval); got != tc.want {
			t.Errorf("Capacity(%s) = %d, want %d", tc.interval, got, tc.want)
		}
	}
}

func at(sec int) Point {
	p := Point{UnixMilli: t0.Add(time.Duration(sec) * time.Second).UnixMilli()}
	p.SetHost(row.Host{SwapInPagesPerSecond: float64(sec)})
	return p
}

func secondsOf(ps []Point) []int {
	var out []int
	for _, p := range ps {
		out = append(out, int(p.Host().SwapInPagesPerSecond))
	}
	return out
}

func TestWindowWrapsAndCuts(t *testing.T) {
	s := &Store{ring: make([]Point, 5)} // small, so a few points wrap it
	if got := s.Window(0); got != nil {
		t.Errorf("empty store: %v", got)
	}
	if _, _, ok := s.Ends(); ok {
		t.Error("an empty store has ends")
	}
	for sec := range 3 {
		s.Add(at(sec))
	}
	if got := secondsOf(s.Window(0)); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("before wrapping: %v", got)
	}
	for sec := 3; sec < 8; sec++ {
		s.Add(at(sec))
	}
	for _, tc := range []struct {
		d    time.Duration
		want []int
	}{
		{0, []int{3, 4, 5, 6, 7}},
		{time.Hour, []int{3, 4, 5, 6, 7}},
		{2 * time.Second, []int{5, 6, 7}}, // no older than 2 s before the newest
		{1500 * time.Millisecond, []int{6, 7}},
		{time.Millisecond, []int{7}},
	} {
		if got := secondsOf(s.Window(tc.d)); !slices.Equal(got, tc.want) {
			t.Errorf("Window(%s) = %v, want %v", tc.d, got, tc.want)
		}
	}
	if o, n, ok := s.Ends(); !ok || o.Host().SwapInPagesPerSecond != 3 || n.Host().SwapInPagesPerSecond != 7 {
		t.Errorf("Ends: %v %v %v, want points 3 and 7", o.Host(), n.Host(), ok)
	}
	if s.Len() != 5 || s.Generation() != 8 {
		t.Errorf("Len %d, Generation %d; want 5, 8", s.Len(), s.Generation())
	}
	w := s.Window(0)
	w[0].SetHost(row.Host{SwapInPagesPerSecond: 99})
	if got := secondsOf(s.Window(0)); got[0] != 3 {
		t.Errorf("changing a window changed the store: %v", got)
	}
}

func sample(sec int, procs ...sampler.Process) *pipeline.Tick {
	return &pipeline.Tick{Reading: &sampler.Reading{Time: t0.Add(time.Duration(sec) * time.Second), Processes: procs, HasRates: true}}
}

func TestObserveKeepsSamplesWithRates(t *testing.T) {
	s := New(time.Second)
	first := sample(0)
	first.Reading.HasRates = false
	s.Observe(nil, first)
	if s.Len() != 0 || !s.Top().Time.IsZero() {
		t.Fatalf("a sample without rates was kept: len %d", s.Len())
	}
	cur := sample(1)
	cur.Reading.Rates = sampler.Rates{
		Host: row.Host{CPUUserPercent: 12.5, CPUSystemPercent: 30, CPUIOWaitPercent: 40, SwapInPagesPerSecond: 46600, SwapOutPagesPerSecond: 45200, PagedInKiBPerSecond: 186400, PagedOutKiBPerSecond: 180800, MajorFaultsPerSecond: 47000, PressureSomePercent: 84, PressureFullPercent: 61},
	}
	cur.Reading.Pressure = &procfs.Pressure{}
	cur.Verdict = &indicators.Verdict{State: 2, HighFaultCount: 25, HasWorkingSetRatio: true, WorkingSetRatio: 2.25}
	s.Observe(first, cur)
	got := s.Window(0)
	want := Point{UnixMilli: cur.Reading.Time.UnixMilli(), WorkingSetRatio: 2.25, HighFault: 25, State: 2, HasPSI: true}
	want.SetHost(cur.Reading.Rates.Host)
	if len(got) != 1 || got[0] != want {
		t.Fatalf("stored %+v\nwant %+v", got, want)
	}
	if got[0].Host() != cur.Reading.Rates.Host {
		t.Errorf("Host() %+v, want the reading's %+v (each figure exact in a float32)", got[0].Host(), cur.Reading.Rates.Host)
	}
	if !got[0].Time().Equal(cur.Reading.Time) {
		t.Errorf("Time() %s, want %s", got[0].Time(), cur.Reading.Time)
	}

	// Without the indicators and PSI the point says so, rather than
	// claiming a normal state and a zero ratio.
	bare := PointOf(sample(2))
	if bare.State != -1 || !math.IsNaN(float64(bare.WorkingSetRatio)) || bare.HasPSI {
		t.Errorf("a sample without detector or PSI: %+v", bare)
	}
}

func proc(pid int, start uint64, anon, file, unknown uint64, stall float64) sampler.Process {
	p := sampler.Process{
		MajorFaults: readout.FaultCounts{readout.Anon: anon, readout.Shmem: anon / 10, readout.File: file, readout.Unknown: unknown},
		Stall:       readout.StallTime{Reclaim: time.Duration(stall * float64(time.Second))}, HasStall: true,
	}
	p.PID, p.Comm, p.StartTicks = pid, "consumer-00", start
	p.ResidentBytes, p.SwapBytes = 7<<20, 3<<20
	return p
}

func TestTopRates(t *testing.T) {
	prev := sample(10, proc(1, 100, 1000, 10, 0, 1.0), proc(2, 200, 50, 0, 0, 0), proc(3, 300, 500, 0, 0, 2.0))
	cur := sample(12,
		proc(1, 100, 3000, 30, 0, 2.5), // 1000 anon/s, 10 file/s, 75 % stalled
		proc(2, 201, 10, 0, 0, 0),      // pid reused: no rates
		proc(4, 400, 70, 0, 0, 0),      // new in the table: no rates
		proc(3, 300, 20, 0, 0, 1.0),    // counters restarted: 0, not negative
	)
	cur.Verdict = &indicators.Verdict{Processes: map[int]indicators.ProcessVerdict{1: {HighFault: true, WorkingSetBytes: 6 << 20, HasWorkingSet: true}}}
	sampler.Complete(prev.Reading, cur.Reading) // as the sampler does
	top := TopOf(cur)
	if !top.Time.Equal(cur.Reading.Time) || len(top.Rows) != 4 {
		t.Fatalf("top: %+v", top)
	}
	r := top.Rows[0]
	if !r.HasRates || r.AnonFaults != 1000 || r.ShmemFaults != 100 || r.FileFaults != 10 || r.UnknownFaults != 0 || !r.HasStall || r.StallPercent != 75 {
		t.Errorf("pid 1 rates: %+v", r)
	}
	if !r.HighFault || !r.HasWorkingSet || r.WorkingSetBytes != 6<<20 || r.ResidentBytes != 7<<20 || r.SwapBytes != 3<<20 || r.Comm != "consumer-00" {
		t.Errorf("pid 1 state: %+v", r)
	}
	for _, i := range []int{1, 2} {
		if top.Rows[i].HasRates || top.Rows[i].HasStall {
			t.Errorf("pid %d has rates without a comparable sample before: %+v", top.Rows[i].PID, top.Rows[i])
		}
	}
	if r := top.Rows[3]; !r.HasRates || r.AnonFaults != 0 || r.StallPercent != 0 {
		t.Errorf("pid 3 after a counter restart: %+v", r)
	}
	if first := TopOf(sample(12, proc(1, 100, 3000, 30, 0, 2.5))); first.Rows[0].HasRates {
		t.Errorf("rates without a sample before: %+v", first.Rows[0])
	}
}

func TestTopIsACopy(t *testing.T) {
	s := New(time.Second)
	s.Observe(sample(0, proc(1, 1, 0, 0, 0, 0)), sample(1, proc(1, 1, 5, 0, 0, 0)))
	top := s.Top()
	top.Rows[0].Comm = "changed"
	if s.Top().Rows[0].Comm != "consumer-00" {
		t.Error("changing Top's rows changed the store")
	}
}

// TestConcurrentReaders runs under -race in make test's CI too: one writer,
// several readers, each window in time order.
func TestConcurrentReaders(t *testing.T) {
	s := New(time.Second)
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				w := s.Window(10 * time.Minute)
				for i := 1; i < len(w); i++ {
					if w[i].UnixMilli < w[i-1].UnixMilli {
						t.Errorf("window out of order at %d", i)
						return
					}
				}
				_ = s.Top()
			}
		})
	}
	for sec := range 3000 {
		s.Observe(nil, sample(sec, proc(1, 1, uint64(sec), 0, 0, 0)))
	}
	close(done)
	wg.Wait()
	if s.Len() != 900 || s.Generation() != 3000 {
		t.Errorf("Len %d, Generation %d; want 900, 3000", s.Len(), s.Generation())
	}
}

// TestMemory holds the store to its size: a point is 56 bytes, so 15 min
// at 1 s is under 50 KiB and the 3600-point cap under 200 KiB, and adding a
// point allocates nothing.
func TestMemory(t *testing.T) {
	const perPoint = 56
	if got := unsafe.Sizeof(Point{}); got > perPoint {
		t.Errorf("a Point is %d bytes, want at most %d", got, perPoint)
	}
	for _, tc := range []struct {
		interval time.Duration
		maxBytes int
	}{
		{time.Second, 50 << 10},
		{100 * time.Millisecond, 200 << 10},
	} {
		s := New(tc.interval)
		if got := s.Cap() * int(unsafe.Sizeof(Point{})); got > tc.maxBytes {
			t.Errorf("ring at %s: %d bytes, want at most %d", tc.interval, got, tc.maxBytes)
		}
	}
	s := New(time.Second)
	p := at(1)
	if allocs := testing.AllocsPerRun(1000, func() { s.Add(p) }); allocs != 0 {
		t.Errorf("Add allocates %.0f times, want 0", allocs)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = s.Window(15 * time.Minute) }); allocs != 1 {
		t.Errorf("Window allocates %.0f times, want 1 (the copy)", allocs)
	}
}

// BenchmarkObserve is the per-sample cost of the store with a full top-K
// table; it reports the ring's bytes per point.
func BenchmarkObserve(b *testing.B) {
	s := New(time.Second)
	var procs, next []sampler.Process
	for pid := range 20 {
		procs = append(procs, proc(pid, 1, 0, 0, 0, 0))
		next = append(next, proc(pid, 1, 100, 1, 0, 0.5))
	}
	prev, cur := sample(0, procs...), sample(1, next...)
	b.ReportAllocs()
	for b.Loop() {
		s.Observe(prev, cur)
	}
	b.ReportMetric(float64(unsafe.Sizeof(Point{})), "bytes/point")
	b.ReportMetric(float64(s.Cap()*int(unsafe.Sizeof(Point{}))), "ring-bytes")
}

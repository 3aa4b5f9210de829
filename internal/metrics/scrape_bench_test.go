package metrics

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/sampler"
	"github.com/thrashscope/thrashscope/internal/swapdev"
	"github.com/thrashscope/thrashscope/internal/workload"
)

// benchTick is a tick of n busy cgroups, named as a run's consumers are.
func benchTick(n int) *pipeline.Tick {
	s := &sampler.Reading{Cgroups: map[uint64]readout.CgroupCounters{}}
	s.Used[sampler.SourceProbes] = true
	var ws []workload.Workload
	for i := range n {
		var c readout.CgroupCounters
		c.MajorFaults[readout.Anon] = uint64(1000 * i)
		c.Stall = readout.StallTime{OffCPU: 2 * time.Second}
		for k := range c.Latency.Slots {
			c.Latency.Slots[k] = uint64(k * i)
		}
		kernel := workload.Kernel{Pressure: workload.Pressure{Some: 3 * time.Second, Full: 2 * time.Second}, HasPressure: true,
			Events: map[string]uint64{"high": 4, "max": 2, "oom": 0, "oom_kill": 0}, Refaults: map[string]uint64{"anon": 100, "file": 50},
			MajorFaults: 150, HasMajorFaults: true, CurrentBytes: 64 << 20, SwapBytes: 32 << 20, MaxBytes: 64 << 20, HighBytes: -1, LimitBytes: 64 << 20}
		ws = append(ws, workload.Workload{Labels: workload.Parse(fmt.Sprintf("/thrashscope-run-20261126-090506-6c39e2/thrashscope-consumer-%02d", i)), Counters: c, Kernel: kernel, HasKernel: true, HasRates: true, State: 2})
	}
	return &pipeline.Tick{Reading: s, Workloads: ws}
}

// BenchmarkScrapeWorkloads is a scrape of the per-cgroup series of the
// default top-K (20 cgroups, each with its fault kinds, stall, latency
// histogram and cgroup files): gathered, encoded as text and gzipped at the
// fastest level, as /metrics answers a Prometheus.
func BenchmarkScrapeWorkloads(b *testing.B) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewWorkloadCollector(fixedSource{benchTick(20)}))
	benchScrape(b, prometheus.ToTransactionalGatherer(reg))
}

// benchScrape gathers reg, encodes it as text and gzips it, as /metrics
// answers a Prometheus, and reports the compressed size.
func benchScrape(b *testing.B, reg prometheus.TransactionalGatherer) {
	var size int
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	for b.Loop() {
		mfs, done, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		buf.Reset()
		zw.Reset(&buf)
		enc := expfmt.NewEncoder(zw, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range mfs {
			enc.Encode(mf)
		}
		done()
		zw.Close()
		size = buf.Len()
	}
	b.ReportMetric(float64(size), "gz-bytes")
}

// benchProcesses is a tick of n tracked processes, as a run's consumers
// and the busiest others are: every family of theirs, working sets too.
func benchProcesses(n int) *pipeline.Tick {
	s := &sampler.Reading{}
	s.Used[sampler.SourceProbes] = true
	s.Probes = []readout.Status{{Name: "faults", Attached: true}}
	v := &indicators.Verdict{Processes: map[int]indicators.ProcessVerdict{}}
	for i := range n {
		var p sampler.Process
		p.PID, p.Comm = 4000+i, "consumer"
		p.MajorFaults[readout.Anon] = uint64(1000 * i)
		p.MinorFaults, p.UserSeconds, p.SystemSeconds = uint64(50_000*i), 1.5, 3.25
		p.ResidentBytes, p.SwapBytes, p.VirtualBytes = 8<<20, 2<<20, 16<<20
		p.Stall, p.HasStall = readout.StallTime{OffCPU: 2 * time.Second}, true
		s.Processes = append(s.Processes, p)
		v.Processes[p.PID] = indicators.ProcessVerdict{HasWorkingSet: true, WorkingSetBytes: 6 << 20, DemandBytes: 7 << 20, HighFault: i%2 == 0}
	}
	return &pipeline.Tick{Reading: s, Verdict: v}
}

// BenchmarkScrapeProcesses is a scrape of the per-process series through a
// run: e4's 25 consumers and the default top-K of 20, gathered, encoded
// and gzipped as BenchmarkScrapeWorkloads.
func BenchmarkScrapeProcesses(b *testing.B) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(fixedSource{benchProcesses(45)}))
	benchScrape(b, prometheus.ToTransactionalGatherer(reg))
}

// runStatus is the run engine's status through e4: 25 consumers.
func runStatus() fakeRuns {
	p := run.Progress{Active: 25, Planned: 25, DemandBytes: 25 << 22, LimitBytes: 100 << 20}
	for i := range 25 {
		p.Cycles = append(p.Cycles, uint64(100*i))
		p.LatenessSeconds = append(p.LatenessSeconds, float64(i)/10)
	}
	return fakeRuns{st: run.Status{Last: true, ID: "20261126-090506-6c39e2", Preset: "e4", Active: true,
		Outcomes: map[string]uint64{run.StateCompleted: 2}, Progress: p, SwapDevice: swapdev.Spec{Profile: "none"},
		Policy: run.PolicyState{Decisions: map[string]uint64{}}}}
}

// BenchmarkScrapeRun is a whole scrape through an e4 run, gathered as the
// observer gathers it: the registry's families (the Go runtime's, the
// daemon's own) beside the package's collectors (45 processes, 20
// workloads, the run's 25 consumers), encoded and gzipped as BenchmarkScrapeWorkloads.
func BenchmarkScrapeRun(b *testing.B) {
	src := fixedSource{runTick()}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), NewSelfCollector("/proc"))
	benchScrape(b, NewGatherer(reg, NewCollector(src), NewWorkloadCollector(src), NewRunCollector(runStatus())).Transactional())
}

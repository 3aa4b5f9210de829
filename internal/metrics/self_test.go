package metrics

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// The observer's own series agree with client_golang's process collector,
// which reads the same kernel files its own way: the same names, and the
// same values but for what moves between the two reads.
func TestSelfCollectorMatchesClientGolang(t *testing.T) {
	ours, theirs := prometheus.NewRegistry(), prometheus.NewRegistry()
	ours.MustRegister(NewSelfCollector("/proc"))
	theirs.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	values := func(r *prometheus.Registry) map[string]float64 {
		mfs, err := r.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			m := mf.GetMetric()[0]
			out[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
		return out
	}
	got, want := values(ours), values(theirs)
	for _, name := range []string{"process_network_receive_bytes_total", "process_network_transmit_bytes_total"} {
		if _, ok := got[name]; ok {
			t.Errorf("%s exported: it is the network namespace's, left out", name)
		}
		delete(want, name)
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want those of %v", got, want)
	}
	for name, w := range want {
		g, ok := got[name]
		var tolerance float64
		switch name {
		case "process_cpu_seconds_total":
			tolerance = 0.05 // ticks of 10 ms between the reads
		case "process_resident_memory_bytes", "process_virtual_memory_bytes":
			tolerance = 0.1 * w // the heap grows between the reads
		case "process_open_fds":
			tolerance = 2
		case "process_start_time_seconds":
			tolerance = 0.011 // a tick
		}
		if !ok || math.Abs(g-w) > tolerance {
			t.Errorf("%s = %v, want %v (within %v)", name, g, w, tolerance)
		}
	}
	if start := got["process_start_time_seconds"]; start > float64(time.Now().Unix())+1 || start < float64(time.Now().Add(-time.Hour).Unix()) {
		t.Errorf("start time %v is not within the last hour", start)
	}
}

// BenchmarkProcessCollectors is one gather of the process's own series,
// this package's collector beside client_golang's.
func BenchmarkProcessCollectors(b *testing.B) {
	for _, c := range []struct {
		name string
		c    prometheus.Collector
	}{{"thrashscope", NewSelfCollector("/proc")}, {"client_golang", collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}} {
		b.Run(c.name, func(b *testing.B) {
			r := prometheus.NewRegistry()
			r.MustRegister(c.c)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Gather(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

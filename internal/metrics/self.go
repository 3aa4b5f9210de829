package metrics

import (
	"os"

	"github.com/prometheus/client_golang/prometheus"
	promprocfs "github.com/prometheus/procfs"

	"github.com/thrashscope/thrashscope/internal/procfs"
)

// SelfCollector exports the observer's own process_* series, named and
// described as client_golang's process collector names them, so the
// usual panels read them: CPU, memory, start time and file descriptors.
// It leaves out process_network_receive_bytes_total and _transmit_: they
// are /proc/self/net/netstat, the totals of the whole network namespace,
// not of the process, and reading that file (and /proc/stat for the boot
// time, at each scrape) was two thirds of the collector's cost. Here the
// boot time is read once.
type SelfCollector struct {
	fs       procfs.FS
	proc     promprocfs.Proc
	pid      int
	bootTime float64 // seconds since the epoch; 0 when unknown

	cpu, vsize, rss, start, openFDs, maxFDs, maxVsize *prometheus.Desc
}

// NewSelfCollector reads the process's series from procPath; a procfs it
// cannot read at all exports nothing (as client_golang's collector, which
// drops its errors).
func NewSelfCollector(procPath string) *SelfCollector {
	c := &SelfCollector{
		pid:      os.Getpid(),
		cpu:      prometheus.NewDesc("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", nil, nil),
		vsize:    prometheus.NewDesc("process_virtual_memory_bytes", "Virtual memory size in bytes.", nil, nil),
		rss:      prometheus.NewDesc("process_resident_memory_bytes", "Resident memory size in bytes.", nil, nil),
		start:    prometheus.NewDesc("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", nil, nil),
		openFDs:  prometheus.NewDesc("process_open_fds", "Number of open file descriptors.", nil, nil),
		maxFDs:   prometheus.NewDesc("process_max_fds", "Maximum number of open file descriptors.", nil, nil),
		maxVsize: prometheus.NewDesc("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", nil, nil),
	}
	c.fs, _ = procfs.NewFS(procPath)
	if pfs, err := promprocfs.NewFS(procPath); err == nil {
		c.proc, _ = pfs.Proc(c.pid)
		if st, err := pfs.Stat(); err == nil {
			c.bootTime = float64(st.BootTime)
		}
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *SelfCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.cpu, c.vsize, c.rss, c.start, c.openFDs, c.maxFDs, c.maxVsize} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A file it cannot read leaves
// its series out.
func (c *SelfCollector) Collect(ch chan<- prometheus.Metric) {
	if p, err := c.fs.ProcessStat(c.pid); err == nil {
		ch <- prometheus.MustNewConstMetric(c.cpu, prometheus.CounterValue, p.UserSeconds+p.SystemSeconds)
		ch <- prometheus.MustNewConstMetric(c.vsize, prometheus.GaugeValue, float64(p.VirtualBytes))
		ch <- prometheus.MustNewConstMetric(c.rss, prometheus.GaugeValue, float64(p.ResidentBytes))
		if c.bootTime > 0 {
			ch <- prometheus.MustNewConstMetric(c.start, prometheus.GaugeValue, c.bootTime+float64(p.StartTicks)/procfs.UserHZ)
		}
	}
	if n, err := c.proc.FileDescriptorsLen(); err == nil {
		ch <- prometheus.MustNewConstMetric(c.openFDs, prometheus.GaugeValue, float64(n))
	}
	if l, err := c.proc.Limits(); err == nil {
		ch <- prometheus.MustNewConstMetric(c.maxFDs, prometheus.GaugeValue, float64(l.OpenFiles))
		ch <- prometheus.MustNewConstMetric(c.maxVsize, prometheus.GaugeValue, float64(l.AddressSpace))
	}
}

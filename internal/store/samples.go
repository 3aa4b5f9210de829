package store

import (
	"bytes"
	"encoding/csv"
	"strconv"
	"sync"

	"github.com/thrashscope/thrashscope/internal/sampler"
)

// Row is one sample interval of a run: the paper's indicators first (the
// contract fixes the first five columns), then what thrashscope adds.
type Row struct {
	ElapsedSeconds float64
	sampler.Rates
	MemoryAvailableBytes, SwapFreeBytes uint64
	ConsumersActive, ConsumersPlanned   int
	DemandBytes, CgroupUsageBytes       int64
	// ConsumerStallPercent is the consumers' summed memory-stall time over
	// the interval, as a share of one CPU; -1 without the stall probe.
	ConsumerStallPercent float64
}

// Columns is the samples.csv header.
var Columns = []string{
	"elapsed_seconds", "cpu_user_percent", "cpu_system_percent",
	"swap_in_pages_per_second", "swap_out_pages_per_second",
	"cpu_iowait_percent", "paged_in_kib_per_second", "paged_out_kib_per_second",
	"major_faults_per_second", "pressure_some_percent", "pressure_full_percent",
	"memory_available_bytes", "swap_free_bytes",
	"consumers_active", "consumers_planned", "demand_bytes", "cgroup_usage_bytes",
	"consumer_stall_percent",
}

func (r Row) record() []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	return []string{
		f(r.ElapsedSeconds), f(r.CPUUserPercent), f(r.CPUSystemPercent),
		f(r.SwapInPagesPerSecond), f(r.SwapOutPagesPerSecond),
		f(r.CPUIOWaitPercent), f(r.PagedInKiBPerSecond), f(r.PagedOutKiBPerSecond),
		f(r.MajorFaultsPerSecond), f(r.PressureSomePercent), f(r.PressureFullPercent),
		strconv.FormatUint(r.MemoryAvailableBytes, 10), strconv.FormatUint(r.SwapFreeBytes, 10),
		i(int64(r.ConsumersActive)), i(int64(r.ConsumersPlanned)), i(r.DemandBytes), i(r.CgroupUsageBytes),
		f(r.ConsumerStallPercent),
	}
}

// Table is a run's growing sample table. It is safe for concurrent use:
// the run appends while the API reads.
type Table struct {
	mu   sync.Mutex
	rows []Row
}

// Append adds a row.
func (t *Table) Append(r Row) {
	t.mu.Lock()
	t.rows = append(t.rows, r)
	t.mu.Unlock()
}

// Rows returns a copy of the rows.
func (t *Table) Rows() []Row {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Row(nil), t.rows...)
}

// CSV encodes the table with its header.
func (t *Table) CSV() []byte {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write(Columns)
	for _, r := range t.Rows() {
		_ = w.Write(r.record())
	}
	w.Flush()
	return b.Bytes()
}

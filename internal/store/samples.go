package store

import (
	"bytes"
	"io"
	"slices"
	"strconv"
	"sync"

	"github.com/thrashscope/thrashscope/internal/row"
)

// Row is one sample interval of a run, a line of samples.csv: the paper's
// indicators first (the contract fixes the first five columns), then what
// thrashscope adds. Rates are per second over the interval, CPU shares of
// all CPUs 0-100, PSI shares of the interval 0-100.
type Row struct {
	ElapsedSeconds float64
	// Host is the host's indicators, the columns from cpu_user_percent to
	// pressure_full_percent.
	row.Host
	MemoryAvailableBytes, SwapFreeBytes uint64
	ConsumersActive, ConsumersPlanned   int
	DemandBytes, CgroupUsageBytes       int64
	// ConsumerStallPercent is the consumers' summed memory-stall time over
	// the interval, as a share of one CPU; Unknown without the stall probe.
	ConsumerStallPercent float64
}

// ConsumerStall is ConsumerStallPercent, and false without the stall probe.
func (r Row) ConsumerStall() (float64, bool) {
	return r.ConsumerStallPercent, r.ConsumerStallPercent != Unknown
}

// Columns is the samples.csv header: the elapsed time, the host's
// indicators (row.HostColumns), then the run's own.
var Columns = slices.Concat([]string{"elapsed_seconds"}, hostColumnNames(), []string{
	"memory_available_bytes", "swap_free_bytes",
	"consumers_active", "consumers_planned", "demand_bytes", "cgroup_usage_bytes",
	"consumer_stall_percent",
})

func hostColumnNames() []string {
	names := make([]string, len(row.HostColumns))
	for i, c := range row.HostColumns {
		names[i] = c.Name
	}
	return names
}

func (r Row) record() []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	rec := make([]string, 0, len(Columns))
	rec = append(rec, f(r.ElapsedSeconds))
	for _, c := range row.HostColumns {
		rec = append(rec, f(*c.Field(&r.Host)))
	}
	return append(rec,
		strconv.FormatUint(r.MemoryAvailableBytes, 10), strconv.FormatUint(r.SwapFreeBytes, 10),
		i(int64(r.ConsumersActive)), i(int64(r.ConsumersPlanned)), i(r.DemandBytes), i(r.CgroupUsageBytes),
		f(r.ConsumerStallPercent),
	)
}

// Table is a run's growing sample table. It is safe for concurrent use:
// the run appends while the API reads.
type Table struct {
	mu   sync.Mutex
	rows []Row
	// enc is the CSV of the header and rows[:encoded] (see ProcessTable).
	enc     []byte
	encoded int
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

// CSV encodes the table with its header, each row once across calls; the
// slice returned is not written again.
func (t *Table) CSV() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.enc == nil {
		t.enc = appendCSV(nil, [][]string{Columns})
	}
	recs := make([][]string, 0, len(t.rows)-t.encoded)
	for _, r := range t.rows[t.encoded:] {
		recs = append(recs, r.record())
	}
	t.enc, t.encoded = appendCSV(t.enc, recs), len(t.rows)
	return t.enc[:len(t.enc):len(t.enc)]
}

// ParseSamples reads a samples.csv. Columns are found by name, so a table
// with more columns (a later version) still reads.
func ParseSamples(b []byte) ([]Row, error) { return ReadSamples(bytes.NewReader(b)) }

// ReadSamples reads a samples.csv from r as ParseSamples does, a line at a
// time: what it holds is its rows, at most maxSampleRows.
func ReadSamples(r io.Reader) ([]Row, error) {
	// Room for the most a run writes, made once: only what the rows fill
	// becomes resident, and a slice grown by appends would hold its old
	// and new arrays at once (twice the rows at the end). The rows are
	// kept in an array of their own size (trim).
	rows := make([]Row, 0, maxSampleRows)
	err := eachRecord(SamplesFile, r, Columns, maxSampleRows, func(n int, rec []string, col map[string]int) error {
		p := parser{rec: rec, col: col, bounds: sampleBounds}
		var r Row
		r.ElapsedSeconds = p.float("elapsed_seconds")
		for _, c := range row.HostColumns {
			*c.Field(&r.Host) = p.float(c.Name)
		}
		r.MemoryAvailableBytes = uint64(p.int("memory_available_bytes"))
		r.SwapFreeBytes = uint64(p.int("swap_free_bytes"))
		r.ConsumersActive = int(p.int("consumers_active"))
		r.ConsumersPlanned = int(p.int("consumers_planned"))
		r.DemandBytes = p.int("demand_bytes")
		r.CgroupUsageBytes = p.int("cgroup_usage_bytes")
		r.ConsumerStallPercent = p.float("consumer_stall_percent")
		if n > 0 {
			p.after(rows[n-1].ElapsedSeconds, r.ElapsedSeconds, true)
		}
		if p.err != nil {
			return rowError{n + 2, p.err}
		}
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return trim(rows), nil
}

// trim is rows in an array of their own length: a reader keeps many runs'
// tables, and each table was read into room for the most a run writes.
func trim[T any](rows []T) []T {
	return append(make([]T, 0, len(rows)), rows...)
}

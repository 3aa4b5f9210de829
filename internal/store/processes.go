package store

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
)

// ProcessesFile is a run's per-consumer table: for each sample, one row per
// live consumer, so a report can draw TPF's memory demand against RSS
// (Jiang and Zhang 2001).
const ProcessesFile = "processes.csv"

// ProcessRow is one consumer at one sample.
type ProcessRow struct {
	ElapsedSeconds float64
	Consumer       int
	PID            int
	Comm           string
	// DemandBytes is the consumer's allocation S from its start to its end,
	// 0 before and after (TPF's memory allocation demand).
	DemandBytes              int64
	ResidentBytes, SwapBytes int64
	WorkingSetBytes          int64   // -1 when unknown
	MajorFaultsPerSecond     float64 // -1 on the first sample of a process
	StallPercent             float64 // share of one CPU stalled on memory; -1 when unknown
}

// ProcessColumns is the processes.csv header.
var ProcessColumns = []string{
	"elapsed_seconds", "consumer", "pid", "comm", "demand_bytes", "resident_bytes", "swap_bytes",
	"working_set_bytes", "major_faults_per_second", "stall_percent",
}

// MaxProcessRows bounds a processes table: 512 consumers over 4 h would be
// millions of rows. Past it the table keeps every other sample, and records
// every other one from then on, so a long run keeps its whole span at a
// coarser step.
const MaxProcessRows = 200_000

// ProcessTable is a run's growing processes table, safe for concurrent use.
type ProcessTable struct {
	mu   sync.Mutex
	rows []processRow
	// seq counts samples offered; every is the stride kept (1, 2, 4, ...).
	seq, every int
	max        int
	// enc is the CSV of the header and rows[:encoded]: a save encodes only
	// the rows added since the last, not the whole table again.
	enc     []byte
	encoded int
}

type processRow struct {
	seq int
	ProcessRow
}

// AppendSample adds one sample's rows.
func (t *ProcessTable) AppendSample(rows []ProcessRow) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.every == 0 {
		t.every = 1
	}
	if t.max == 0 {
		t.max = MaxProcessRows
	}
	seq := t.seq
	t.seq++
	if seq%t.every != 0 {
		return
	}
	for len(t.rows)+len(rows) > t.max && len(t.rows) > 0 {
		t.every *= 2
		t.rows = slices.DeleteFunc(t.rows, func(r processRow) bool { return r.seq%t.every != 0 })
		t.enc, t.encoded = nil, 0 // rows went from the middle: encode anew
		if seq%t.every != 0 {
			return
		}
	}
	for _, r := range rows {
		t.rows = append(t.rows, processRow{seq, r})
	}
}

// Rows returns a copy of the rows.
func (t *ProcessTable) Rows() []ProcessRow {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]ProcessRow, len(t.rows))
	for i, r := range t.rows {
		out[i] = r.ProcessRow
	}
	return out
}

// Len is the number of rows.
func (t *ProcessTable) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.rows)
}

// CSV encodes the table with its header. Rows encoded by an earlier call
// are kept encoded, so a growing table costs each save its new rows only;
// the slice returned is not written again.
func (t *ProcessTable) CSV() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.enc == nil {
		t.enc = appendCSV(nil, [][]string{ProcessColumns})
	}
	recs := make([][]string, 0, len(t.rows)-t.encoded)
	for _, r := range t.rows[t.encoded:] {
		recs = append(recs, r.record())
	}
	t.enc, t.encoded = appendCSV(t.enc, recs), len(t.rows)
	return t.enc[:len(t.enc):len(t.enc)]
}

// appendCSV appends the records to b as CSV lines.
func appendCSV(b []byte, recs [][]string) []byte {
	buf := bytes.NewBuffer(b)
	w := csv.NewWriter(buf)
	_ = w.WriteAll(recs) // a bytes.Buffer does not fail
	return buf.Bytes()
}

func (r ProcessRow) record() []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	return []string{
		f(r.ElapsedSeconds), i(int64(r.Consumer)), i(int64(r.PID)), r.Comm, i(r.DemandBytes),
		i(r.ResidentBytes), i(r.SwapBytes), i(r.WorkingSetBytes), f(r.MajorFaultsPerSecond), f(r.StallPercent),
	}
}

// ParseProcesses reads a processes.csv. Columns are found by name, so a
// table with more columns (a later version) still reads.
func ParseProcesses(b []byte) ([]ProcessRow, error) {
	recs, col, err := readCSV(b, ProcessColumns)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ProcessesFile, err)
	}
	rows := make([]ProcessRow, 0, len(recs))
	for n, rec := range recs {
		p := parser{rec: rec, col: col}
		r := ProcessRow{
			ElapsedSeconds:       p.float("elapsed_seconds"),
			Consumer:             int(p.int("consumer")),
			PID:                  int(p.int("pid")),
			Comm:                 rec[col["comm"]],
			DemandBytes:          p.int("demand_bytes"),
			ResidentBytes:        p.int("resident_bytes"),
			SwapBytes:            p.int("swap_bytes"),
			WorkingSetBytes:      p.int("working_set_bytes"),
			MajorFaultsPerSecond: p.float("major_faults_per_second"),
			StallPercent:         p.float("stall_percent"),
		}
		if p.err != nil {
			return nil, fmt.Errorf("%s line %d: %w", ProcessesFile, n+2, p.err)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// readCSV reads a table with a header and checks that the wanted columns
// are there; col maps each column name to its index.
func readCSV(b []byte, want []string) (recs [][]string, col map[string]int, err error) {
	r := csv.NewReader(bytes.NewReader(b))
	r.ReuseRecord = false
	all, err := r.ReadAll()
	if err != nil {
		return nil, nil, err
	}
	if len(all) == 0 {
		return nil, nil, errors.New("empty: no header")
	}
	col = map[string]int{}
	for i, name := range all[0] {
		col[name] = i
	}
	for _, name := range want {
		if _, ok := col[name]; !ok {
			return nil, nil, fmt.Errorf("no %s column", name)
		}
	}
	return all[1:], col, nil
}

// parser reads typed fields of one record; the first error sticks.
type parser struct {
	rec []string
	col map[string]int
	err error
}

func (p *parser) field(name string) string { return p.rec[p.col[name]] }

func (p *parser) float(name string) float64 {
	v, err := strconv.ParseFloat(p.field(name), 64)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("%s: %q is not a number", name, p.field(name))
	}
	return v
}

func (p *parser) int(name string) int64 {
	v, err := strconv.ParseInt(p.field(name), 10, 64)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("%s: %q is not an integer", name, p.field(name))
	}
	return v
}

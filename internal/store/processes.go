package store

import (
	"bytes"
	"encoding/csv"
	"io"
	"strconv"
	"strings"
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
	WorkingSetBytes          int64   // Unknown when not measured
	MajorFaultsPerSecond     float64 // Unknown on the first sample of a process
	StallPercent             float64 // share of one CPU stalled on memory; Unknown without the stall probe
}

// Unknown is how a table cell says a figure was not known, in memory as in
// the CSV: the readers ask the rows' accessors, which say it with ok, as
// the rest of thrashscope does.
const Unknown = -1

// WorkingSet is the consumer's working set, and false when not measured.
func (r ProcessRow) WorkingSet() (int64, bool) {
	return r.WorkingSetBytes, r.WorkingSetBytes != Unknown
}

// MajorFaultRate is maj_flt per second, and false on a first sample.
func (r ProcessRow) MajorFaultRate() (float64, bool) {
	return r.MajorFaultsPerSecond, r.MajorFaultsPerSecond != Unknown
}

// Stall is the share of one CPU stalled on memory, and false without the
// stall probe.
func (r ProcessRow) Stall() (float64, bool) { return r.StallPercent, r.StallPercent != Unknown }

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
// It holds the table as its CSV only: each sample's rows are encoded as they
// come, so a long run costs about its file's size in memory and a save
// encodes nothing.
type ProcessTable struct {
	mu sync.Mutex
	// enc is the header and the kept samples' rows; samples says where each
	// kept sample starts in it.
	enc     []byte
	samples []sampleSpan
	rows    int
	// seq counts samples offered; every is the stride kept (1, 2, 4, ...).
	seq, every int
	max        int
}

type sampleSpan struct {
	seq, offset, rows int
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
	if t.enc == nil {
		t.enc = appendCSV(nil, [][]string{ProcessColumns})
	}
	seq := t.seq
	t.seq++
	if seq%t.every != 0 {
		return
	}
	for t.rows+len(rows) > t.max && t.rows > 0 {
		t.every *= 2
		t.compact()
		if seq%t.every != 0 {
			return
		}
	}
	recs := make([][]string, len(rows))
	for i, r := range rows {
		recs[i] = r.record()
	}
	t.samples = append(t.samples, sampleSpan{seq: seq, offset: len(t.enc), rows: len(rows)})
	t.enc = appendCSV(t.enc, recs)
	t.rows += len(rows)
}

// compact keeps the samples on the stride, in a new buffer: a slice CSV
// returned earlier may still be being written.
func (t *ProcessTable) compact() {
	header := t.enc
	if len(t.samples) > 0 {
		header = t.enc[:t.samples[0].offset]
	}
	enc := append([]byte(nil), header...)
	var kept []sampleSpan
	rows := 0
	for i, s := range t.samples {
		if s.seq%t.every != 0 {
			continue
		}
		end := len(t.enc)
		if i+1 < len(t.samples) {
			end = t.samples[i+1].offset
		}
		kept = append(kept, sampleSpan{seq: s.seq, offset: len(enc), rows: s.rows})
		enc = append(enc, t.enc[s.offset:end]...)
		rows += s.rows
	}
	t.enc, t.samples, t.rows = enc, kept, rows
}

// Rows decodes the rows; nil for an empty table.
func (t *ProcessTable) Rows() []ProcessRow {
	rows, _ := ParseProcesses(t.CSV()) // what AppendSample encoded reads back
	return rows
}

// Len is the number of rows.
func (t *ProcessTable) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rows
}

// CSV is the table with its header. The slice returned is never written
// again.
func (t *ProcessTable) CSV() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.enc == nil {
		return appendCSV(nil, [][]string{ProcessColumns})
	}
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
func ParseProcesses(b []byte) ([]ProcessRow, error) { return ReadProcesses(bytes.NewReader(b)) }

// ReadProcesses reads a processes.csv from r as ParseProcesses does, a
// line at a time: what it holds is its rows (at most maxProcessRows), each
// distinct comm once.
func ReadProcesses(r io.Reader) ([]ProcessRow, error) {
	rows := make([]ProcessRow, 0, maxProcessRows) // as ReadSamples
	comms := map[string]string{}
	err := eachRecord(ProcessesFile, r, ProcessColumns, maxProcessRows, func(n int, rec []string, col map[string]int) error {
		p := parser{rec: rec, col: col, bounds: processBounds}
		r := ProcessRow{
			ElapsedSeconds:       p.float("elapsed_seconds"),
			Consumer:             int(p.int("consumer")),
			PID:                  int(p.int("pid")),
			Comm:                 p.text("comm", maxCommBytes),
			DemandBytes:          p.int("demand_bytes"),
			ResidentBytes:        p.int("resident_bytes"),
			SwapBytes:            p.int("swap_bytes"),
			WorkingSetBytes:      p.int("working_set_bytes"),
			MajorFaultsPerSecond: p.float("major_faults_per_second"),
			StallPercent:         p.float("stall_percent"),
		}
		// A field is a piece of its whole line: a comm kept is a copy,
		// and a consumer's, seen on every sample, is kept once.
		if c, ok := comms[r.Comm]; ok {
			r.Comm = c
		} else {
			r.Comm = strings.Clone(r.Comm)
			if len(comms) < 4096 {
				comms[r.Comm] = r.Comm
			}
		}
		if n > 0 {
			p.after(rows[n-1].ElapsedSeconds, r.ElapsedSeconds, false)
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

package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thrashscope/thrashscope/internal/row"
)

func TestProcessTableRoundTrip(t *testing.T) {
	var tb ProcessTable
	in := []ProcessRow{
		{ElapsedSeconds: 10.5, Consumer: 0, PID: 101, Comm: "consumer-00", DemandBytes: 10_000_000, ResidentBytes: 8 << 20,
			SwapBytes: 2 << 20, WorkingSetBytes: -1, MajorFaultsPerSecond: -1, StallPercent: -1},
		{ElapsedSeconds: 11.5, Consumer: 0, PID: 101, Comm: "consumer-00", DemandBytes: 10_000_000, ResidentBytes: 9 << 20,
			SwapBytes: 1 << 20, WorkingSetBytes: 4 << 20, MajorFaultsPerSecond: 1234.5, StallPercent: 12.25},
	}
	tb.AppendSample(in[:1])
	tb.AppendSample(in[1:])
	b := tb.CSV()
	if first, _, _ := strings.Cut(string(b), "\n"); first != strings.Join(ProcessColumns, ",") {
		t.Errorf("header %q", first)
	}
	out, err := ParseProcesses(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0] != in[0] || out[1] != in[1] {
		t.Errorf("round trip:\n got %+v\nwant %+v", out, in)
	}
}

func TestProcessTableStaysBounded(t *testing.T) {
	tb := ProcessTable{max: 100}
	// 25 consumers a sample: 4 samples fit, then the stride doubles.
	for s := range 1000 {
		rows := make([]ProcessRow, 25)
		for i := range rows {
			rows[i] = ProcessRow{ElapsedSeconds: float64(s), Consumer: i}
		}
		tb.AppendSample(rows)
		if n := tb.Len(); n > 100 {
			t.Fatalf("after sample %d the table holds %d rows, over its bound of 100", s, n)
		}
	}
	rows := tb.Rows()
	if rows[0].ElapsedSeconds != 0 {
		t.Errorf("the first sample was dropped: starts at %g", rows[0].ElapsedSeconds)
	}
	last := rows[len(rows)-1].ElapsedSeconds
	if last < 1000-float64(tb.every) {
		t.Errorf("the table ends at %g with a stride of %d: the recent samples are missing", last, tb.every)
	}
	// Kept samples are evenly spaced, each with all its consumers.
	per := map[float64]int{}
	for _, r := range rows {
		per[r.ElapsedSeconds]++
	}
	for at, n := range per {
		if n != 25 || int(at)%tb.every != 0 {
			t.Errorf("sample at %g has %d rows (stride %d)", at, n, tb.every)
		}
	}
}

func TestParseProcessesErrorsNameTheProblem(t *testing.T) {
	hdr := strings.Join(ProcessColumns, ",") + "\n"
	cases := map[string]string{
		"":                                  "no header",
		"elapsed_seconds,pid\n1,2\n":        "no consumer column",
		hdr + "1,0,101,c,x,0,0,-1,0,0\n":    `line 2: demand_bytes: "x" is not an integer`,
		hdr + "1,0,101,c,0,0,0,-1,0\n":      "wrong number of fields",
		hdr + "nan?,0,101,c,0,0,0,-1,0,0\n": `elapsed_seconds: "nan?" is not a number`,
	}
	for in, want := range cases {
		if _, err := ParseProcesses([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want it to say %s", in, err, want)
		}
	}
}

func TestParseSamplesReadsWhatCSVWrites(t *testing.T) {
	var tb Table
	want := Row{
		Host: row.Host{CPUUserPercent: 12.5, CPUSystemPercent: 40.25, SwapInPagesPerSecond: 41000, SwapOutPagesPerSecond: 39000, PressureSomePercent: 80, PressureFullPercent: 61.5, MajorFaultsPerSecond: 41100}, ElapsedSeconds: 2,
		MemoryAvailableBytes: 1 << 33, SwapFreeBytes: 1 << 32, ConsumersActive: 24, ConsumersPlanned: 25,
		DemandBytes: 240_000_000, CgroupUsageBytes: 104857600, ConsumerStallPercent: -1}
	tb.Append(want)
	rows, err := ParseSamples(tb.CSV())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0] != want {
		t.Errorf("got %+v\nwant %+v", rows, want)
	}
	// Extra columns from a later version are ignored.
	b := strings.Replace(string(tb.CSV()), "consumer_stall_percent\n", "consumer_stall_percent,future\n", 1)
	b = strings.Replace(b, "-1.000\n", "-1.000,7\n", 1)
	if rows, err := ParseSamples([]byte(b)); err != nil || len(rows) != 1 {
		t.Errorf("with an extra column: %v %v", rows, err)
	}
}

func TestOpenExistingMakesNothing(t *testing.T) {
	root := t.TempDir()
	if _, err := OpenExisting(root); err == nil || !strings.Contains(err.Error(), "no runs/ directory") {
		t.Errorf("a directory without runs/: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "runs")); !errors.Is(err, os.ErrNotExist) {
		t.Error("OpenExisting made runs/")
	}
	d, _ := Open(root)
	d.WriteFile("r1", SamplesFile, []byte("a\n"))
	tmp := filepath.Join(root, "runs", "r1", ".tmp-samples.csv-1")
	os.WriteFile(tmp, nil, 0o600)
	r, err := OpenExisting(root)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := r.ReadFile("r1", SamplesFile); err != nil || string(b) != "a\n" {
		t.Errorf("read %q, %v", b, err)
	}
	if _, err := os.Stat(tmp); err != nil {
		t.Error("OpenExisting removed a writer's temporary file")
	}
	// A runs/ that is a link to another directory's runs is refused, as
	// the writer refuses it.
	linked := t.TempDir()
	if err := os.Symlink(filepath.Join(root, "runs"), filepath.Join(linked, "runs")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenExisting(linked); err == nil || !strings.Contains(err.Error(), "runs/ is a symbolic link") {
		t.Errorf("runs/ a link: %v, want it refused", err)
	}
}

// wholeCSV encodes rows from scratch, as the tables did before they kept
// their encoding.
func wholeCSV(header []string, recs [][]string) []byte {
	return appendCSV(appendCSV(nil, [][]string{header}), recs)
}

// Saving a growing table, by parts and across a compaction, gives the bytes
// a whole encode gives, and a slice already returned is never overwritten.
func TestTablesEncodeIncrementally(t *testing.T) {
	tb := ProcessTable{max: 100}
	var returned [][]byte
	var snapshots [][]byte
	var all []ProcessRow
	for s := range 40 {
		var rows []ProcessRow
		for c := range 7 {
			rows = append(rows, ProcessRow{ElapsedSeconds: float64(s), Consumer: c, PID: 100 + c, Comm: "consumer, \"x\"", DemandBytes: int64(s * c)})
		}
		tb.AppendSample(rows)
		all = append(all, rows...)
		if s%3 == 0 {
			got := tb.CSV()
			// Until the table compacts (past 100 rows), it holds every row
			// appended; after, the rows it decodes to.
			src := all
			if len(all) > 100 {
				src = tb.Rows()
			}
			var recs [][]string
			for _, r := range src {
				recs = append(recs, r.record())
			}
			if want := wholeCSV(ProcessColumns, recs); !bytes.Equal(got, want) {
				t.Fatalf("after sample %d the incremental CSV differs from a whole encode", s)
			}
			returned = append(returned, got)
			snapshots = append(snapshots, bytes.Clone(got))
		}
	}
	for i := range returned {
		if !bytes.Equal(returned[i], snapshots[i]) {
			t.Errorf("save %d's bytes changed after later saves", i)
		}
	}
	if _, err := ParseProcesses(tb.CSV()); err != nil {
		t.Error(err)
	}

	var st Table
	for s := range 25 {
		st.Append(Row{ElapsedSeconds: float64(s), ConsumersActive: s})
		if s%4 == 0 || s == 24 {
			var recs [][]string
			for _, r := range st.Rows() {
				recs = append(recs, r.record())
			}
			if got, want := st.CSV(), wholeCSV(Columns, recs); !bytes.Equal(got, want) {
				t.Fatalf("samples after row %d: incremental CSV differs", s)
			}
		}
	}
}

// BenchmarkProcessTableSave is one save of an e2-sized table (25 consumers,
// 780 s each: about 19,500 rows) once ten samples were added since the last
// save, the observer's cadence: the table as it is (rows encoded as they
// come), against keeping the rows and encoding them all at each save (what
// the table did before).
func BenchmarkProcessTableSave(b *testing.B) {
	for _, mode := range []string{"incremental", "whole"} {
		b.Run(mode, func(b *testing.B) {
			var tb ProcessTable
			var all []ProcessRow // what the table held before it kept only its CSV
			sample := func(s int) {
				rows := make([]ProcessRow, 25)
				for c := range rows {
					rows[c] = ProcessRow{ElapsedSeconds: float64(s), Consumer: c, PID: 1000 + c, Comm: "consumer-00", DemandBytes: 1e8,
						ResidentBytes: 6e7, SwapBytes: 4e7, WorkingSetBytes: 5e7, MajorFaultsPerSecond: 812.5, StallPercent: 21.25}
				}
				if mode == "incremental" {
					tb.AppendSample(rows)
				} else {
					all = append(all, rows...)
				}
			}
			for s := range 780 {
				sample(s)
			}
			tb.CSV()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				for k := range 10 {
					sample(780 + 10*i + k)
				}
				if mode == "incremental" {
					_ = tb.CSV()
					continue
				}
				var recs [][]string
				for _, r := range all {
					recs = append(recs, r.record())
				}
				_ = wholeCSV(ProcessColumns, recs)
			}
		})
	}
}

package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thrashscope/thrashscope/internal/sampler"
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
	want := Row{ElapsedSeconds: 2, Rates: sampler.Rates{CPUUserPercent: 12.5, CPUSystemPercent: 40.25, SwapInPagesPerSecond: 41000,
		SwapOutPagesPerSecond: 39000, PressureSomePercent: 80, PressureFullPercent: 61.5, MajorFaultsPerSecond: 41100},
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
}

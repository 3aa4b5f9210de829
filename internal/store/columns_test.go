package store

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// sampleRow is one valid samples.csv line with cell i replaced by v.
func sampleRow(i int, v string) string {
	cells := []string{"1.000", "10.000", "20.000", "300.000", "200.000", "1.000", "4.000", "5.000", "300.000",
		"50.000", "20.000", "1024", "2048", "3", "4", "300", "200", "12.000"}
	cells[i] = v
	return strings.Join(cells, ",")
}

// Every number column of every table refuses NaN, ±Inf and values past its
// range, naming the file, the line and the column: a report or a
// comparison never does arithmetic on them.
func TestTablesRefuseNumbersOutsideTheirColumn(t *testing.T) {
	bad := []string{"NaN", "nan", "+Inf", "-Inf", "inf", "-1e308", "1e308", "-0.5"}
	hdr := strings.Join(Columns, ",") + "\n"
	for i, col := range Columns {
		for _, v := range bad {
			if v == "-0.5" && col == "consumer_stall_percent" {
				continue // covered below: only -1 stands for unknown
			}
			_, err := ParseSamples([]byte(hdr + sampleRow(i, v) + "\n"))
			want := fmt.Sprintf("samples.csv line 2: %s: ", col)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s = %s: %v, want an error starting %q", col, v, err, want)
			}
		}
	}
	// -1 is unknown where a column has that sense, and nowhere else.
	if _, err := ParseSamples([]byte(hdr + sampleRow(17, "-1") + "\n")); err != nil {
		t.Errorf("consumer_stall_percent -1 (unknown): %v", err)
	}
	for _, in := range []string{sampleRow(17, "-0.5"), sampleRow(3, "-1")} {
		if _, err := ParseSamples([]byte(hdr + in + "\n")); err == nil {
			t.Errorf("%q was read", in)
		}
	}
	// A percent of all CPUs past 100 is not one.
	if _, err := ParseSamples([]byte(hdr + sampleRow(1, "100.5") + "\n")); err == nil || !strings.Contains(err.Error(), "cpu_user_percent: 100.5 is outside 0 to 100") {
		t.Errorf("cpu_user_percent 100.5: %v", err)
	}

	phdr := strings.Join(ProcessColumns, ",") + "\n"
	prow := []string{"1.000", "0", "101", "c", "0", "0", "0", "-1", "-1", "-1"}
	for i, col := range ProcessColumns {
		if col == "comm" {
			continue
		}
		for _, v := range bad {
			cells := append([]string(nil), prow...)
			cells[i] = v
			_, err := ParseProcesses([]byte(phdr + strings.Join(cells, ",") + "\n"))
			want := fmt.Sprintf("processes.csv line 2: %s: ", col)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s = %s: %v, want an error starting %q", col, v, err, want)
			}
		}
	}
	if _, err := ParseProcesses([]byte(phdr + "1,0,101,\"a\xffb\",0,0,0,-1,-1,-1\n")); err == nil || !strings.Contains(err.Error(), "line 2: comm:") {
		t.Errorf("a comm of invalid UTF-8: %v", err)
	}

	fhdr := strings.Join(FillColumns, ",") + "\n"
	frow := []string{"0", "1048576", "3", "0.5", "0.1", "1024", "2048"}
	for i, col := range FillColumns {
		for _, v := range bad {
			cells := append([]string(nil), frow...)
			cells[i] = v
			_, err := ParseFill([]byte(fhdr + strings.Join(cells, ",") + "\n"))
			want := fmt.Sprintf("fill.csv line 2: %s: ", col)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s = %s: %v, want an error starting %q", col, v, err, want)
			}
		}
	}
}

// Rows are in time order: a sample each, a processes table's samples
// several rows each.
func TestTablesAreInTimeOrder(t *testing.T) {
	hdr := strings.Join(Columns, ",") + "\n"
	for _, tc := range []struct {
		rows []string
		ok   bool
	}{
		{[]string{sampleRow(0, "1"), sampleRow(0, "2")}, true},
		{[]string{sampleRow(0, "2"), sampleRow(0, "1")}, false},
		{[]string{sampleRow(0, "2"), sampleRow(0, "2")}, false},
	} {
		_, err := ParseSamples([]byte(hdr + strings.Join(tc.rows, "\n") + "\n"))
		if tc.ok != (err == nil) || err != nil && !strings.Contains(err.Error(), "samples.csv line 3: elapsed_seconds: ") {
			t.Errorf("%v: %v", tc.rows, err)
		}
	}
	phdr := strings.Join(ProcessColumns, ",") + "\n"
	same := phdr + "1,0,101,a,0,0,0,-1,-1,-1\n1,1,102,b,0,0,0,-1,-1,-1\n2,0,101,a,0,0,0,-1,-1,-1\n"
	if _, err := ParseProcesses([]byte(same)); err != nil {
		t.Errorf("two consumers in one sample: %v", err)
	}
	back := phdr + "2,0,101,a,0,0,0,-1,-1,-1\n1,0,101,a,0,0,0,-1,-1,-1\n"
	if _, err := ParseProcesses([]byte(back)); err == nil || !strings.Contains(err.Error(), "processes.csv line 3: elapsed_seconds") {
		t.Errorf("a processes table going back in time: %v", err)
	}
}

// checkRows holds every number a parser returned to its column's range:
// what FuzzParseTables asserts of any input the parsers accept.
func checkRows(t *testing.T, samples []Row, procs []ProcessRow, fill []FillRow) {
	t.Helper()
	in := func(col string, b bound, v float64) {
		if math.IsNaN(v) || math.IsInf(v, 0) || !(b.orUnknown && v == Unknown) && (v < b.lo || v > b.hi) {
			t.Fatalf("%s = %v was accepted", col, v)
		}
	}
	for _, r := range samples {
		for col, v := range map[string]float64{
			"elapsed_seconds": r.ElapsedSeconds, "cpu_user_percent": r.CPUUserPercent, "cpu_system_percent": r.CPUSystemPercent,
			"cpu_iowait_percent": r.CPUIOWaitPercent, "swap_in_pages_per_second": r.SwapInPagesPerSecond,
			"swap_out_pages_per_second": r.SwapOutPagesPerSecond, "paged_in_kib_per_second": r.PagedInKiBPerSecond,
			"paged_out_kib_per_second": r.PagedOutKiBPerSecond, "major_faults_per_second": r.MajorFaultsPerSecond,
			"pressure_some_percent": r.PressureSomePercent, "pressure_full_percent": r.PressureFullPercent,
			"consumer_stall_percent": r.ConsumerStallPercent, "demand_bytes": float64(r.DemandBytes),
			"consumers_active": float64(r.ConsumersActive),
		} {
			in(col, sampleBounds[col], v)
		}
	}
	for _, r := range procs {
		for col, v := range map[string]float64{
			"elapsed_seconds": r.ElapsedSeconds, "consumer": float64(r.Consumer), "working_set_bytes": float64(r.WorkingSetBytes),
			"major_faults_per_second": r.MajorFaultsPerSecond, "stall_percent": r.StallPercent,
		} {
			in(col, processBounds[col], v)
		}
	}
	for _, r := range fill {
		for col, v := range map[string]float64{"fill_seconds_mean": r.MeanSeconds, "fill_seconds_sd": r.SDSeconds, "memory_free_bytes": r.MemoryFreeBytes} {
			in(col, fillBounds[col], v)
		}
	}
}

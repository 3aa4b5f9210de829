package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// measureEnv makes the test binary a small process that runs the command
// after it and prints the command's peak RSS (KiB) last. A process started
// by Go shares its starter's memory until it execs, and the kernel keeps
// that memory's peak as the new program's (ru_maxrss): a test process that
// had built 60 MB of input would be counted in the tool's peak. The
// measurer is fresh and small, and so is what it hands down.
const measureEnv = "THRASHSCOPE_TEST_MEASURE_RSS"

func TestMain(m *testing.M) {
	if os.Getenv(measureEnv) != "" {
		cmd := exec.Command(os.Args[1], os.Args[2:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		err := cmd.Run()
		if cmd.ProcessState == nil {
			fmt.Fprintln(os.Stderr, "measure:", err)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "\nmaxrss %d\n", cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss)
		os.Exit(cmd.ProcessState.ExitCode())
	}
	os.Exit(m.Run())
}

// The report command, run as a user would, on the report package's
// committed e4 run.
func TestReportCommand(t *testing.T) {
	bin := testenv.Binary(t, "thrashtool")
	data := filepath.Join("..", "..", "internal", "report", "testdata", "data")
	const id = "20261122-032121-67c5ed"
	out := filepath.Join(t.TempDir(), "report")
	b, err := exec.Command(bin, "report", "--run", id, "--data.dir", data, "--out", out).CombinedOutput()
	if err != nil {
		t.Fatalf("thrashtool report: %v\n%s", err, b)
	}
	for _, f := range []string{"summary.txt", id + "/paper.png", id + "/processes.svg"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if !strings.Contains(string(b), filepath.Join(out, f)) {
			t.Errorf("the output does not list %s:\n%s", f, b)
		}
	}

	b, err = exec.Command(bin, "report", "--run", "nope", "--data.dir", data, "--out", out).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(b), `thrashtool report: no run "nope"`) || !strings.Contains(string(b), id) {
		t.Errorf("unknown run: %v\n%s", err, b)
	}
	if b, err := exec.Command(bin, "report", "--data.dir", data).CombinedOutput(); err == nil || !strings.Contains(string(b), "--run") {
		t.Errorf("report without --run: %v\n%s", err, b)
	}
}

// compare --timeout aborts a run that is still going, keeps it as aborted
// with the reason and the work it did, and goes on to the next; nothing of
// either run is left behind.
func TestCompareTimeout(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.Binary(t, "loadgen") // beside thrashtool: the consumers
	bin := testenv.Binary(t, "thrashtool")
	out := t.TempDir()
	// A million cycles: the consumer that runs alone first never ends.
	cmd := exec.Command(bin, "compare", "--spec", `{"preset":"pair","scale":0.1,"cycles":1000000}`,
		"--policy", "none", "--repeats", "2", "--timeout", "3s", "--out", out)
	begin := time.Now()
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("thrashtool compare: %v\n%s", err, b)
	}
	t.Logf("two runs of a 3 s timeout in %s", time.Since(begin).Round(time.Millisecond))
	tab, err := os.ReadFile(filepath.Join(out, "compare.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(tab), "(none): aborted, still running after the timeout of 3s; 0 of its 2000000 write cycles done"); n != 2 {
		t.Errorf("compare.txt names %d runs aborted past the timeout, want 2:\n%s", n, tab)
	}
	recs, _ := filepath.Glob(filepath.Join(out, "runs", "*", "record.json"))
	if len(recs) != 2 {
		t.Fatalf("%d run records, want 2", len(recs))
	}
	for _, p := range recs {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var rec run.Record
		if err := json.Unmarshal(raw, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.State != run.StateAborted || rec.EndedAt == nil || rec.EndedAt.Sub(rec.StartedAt) > 30*time.Second || rec.MakespanSeconds != 0 {
			t.Errorf("%s: %s %q, ended %v after its start, makespan %g (want none: it did not do its work)", rec.ID, rec.State, rec.Reason, rec.EndedAt, rec.MakespanSeconds)
		}
		if _, err := os.Stat(rec.Cgroup); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("run cgroup %s left behind", rec.Cgroup)
		}
		if rec.Alone != nil && rec.Alone.PID != 0 {
			if c, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", rec.Alone.PID)); err == nil && strings.HasPrefix(string(c), "consumer-") {
				t.Errorf("the consumer that ran alone (pid %d) outlived its run", rec.Alone.PID)
			}
		}
	}
}

// compare across settings, end to end: one spec on disk swap and on a
// zram device, interleaved; the table has a row for each set of settings
// and zram's own cost for the zram runs; each record holds what was asked
// and that it was given back, and the host's swap areas are as before.
func TestCompareAcrossSettings(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	testenv.Binary(t, "loadgen")
	bin := testenv.Binary(t, "thrashtool")
	swapsBefore := swapAreas()
	testenv.RequireFreeZram(t)
	second := `{"swap":"zram"}`
	out := t.TempDir()
	spec := `{"preset":"e4","scale":0.05,"consumers":6,"interval":"1s","lead_in":"1s"}`
	b, err := exec.Command(bin, "compare", "--spec", spec, "--settings", `{"swap":"disk"}`, "--settings", second,
		"--settings.allow-host", "--repeats", "1", "--out", out).CombinedOutput()
	if err != nil {
		t.Fatalf("thrashtool compare: %v\n%s", err, b)
	}
	tab, err := os.ReadFile(filepath.Join(out, "compare.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| settings |", "| swap=disk |", "| swap=" + strings.Trim(second[9:], `"}`) + " |"} {
		if !strings.Contains(string(tab), want) {
			t.Errorf("compare.txt lacks %q:\n%s", want, tab)
		}
	}
	if !strings.Contains(string(tab), "zram_compression_ratio") {
		t.Errorf("compare.txt has no zram cost:\n%s", tab)
	}
	recs, _ := filepath.Glob(filepath.Join(out, "runs", "*", "record.json"))
	if len(recs) != 2 {
		t.Fatalf("%d run records, want 2", len(recs))
	}
	for _, p := range recs {
		raw, _ := os.ReadFile(p)
		var rec run.Record
		if err := json.Unmarshal(raw, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.State != run.StateCompleted || rec.Settings == nil || !rec.Settings.Restored || rec.Settings.Asked["swap"] == nil {
			t.Errorf("%s: %s %q, settings %+v; want completed under its swap, restored", rec.ID, rec.State, rec.Reason, rec.Settings)
		}
	}
	if after := swapAreas(); after != swapsBefore {
		t.Errorf("the swap areas after the comparison: %s, want %s", after, swapsBefore)
	}
}

// swapAreas are /proc/swaps' areas and their priorities.
func swapAreas() string {
	b, _ := os.ReadFile("/proc/swaps")
	var out []string
	for _, l := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(l); len(f) >= 5 {
			out = append(out, f[0]+" "+f[4])
		}
	}
	return strings.Join(out, ", ")
}

// The report command on tables no run writes: a gzipped one that inflates
// far past the 64 MiB a table may hold, a line of 60 MB, and lines past the
// rows a run writes. Each is refused with the file and the reason, and the
// tool's peak resident memory stays under 100 MB: the tables are streamed.
func TestReportRefusesHostileTablesInBoundedMemory(t *testing.T) {
	bin := testenv.Binary(t, "thrashtool")
	const id = "20261122-032121-67c5ed"
	src := filepath.Join("..", "..", "internal", "report", "testdata", "data", "runs", id)
	record, err := os.ReadFile(filepath.Join(src, "record.json"))
	if err != nil {
		t.Fatal(err)
	}
	samples, err := os.ReadFile(filepath.Join(src, "samples.csv"))
	if err != nil {
		t.Fatal(err)
	}
	header, _, _ := strings.Cut(string(samples), "\n")
	for _, tc := range []struct {
		name, file string
		write      func(w io.Writer) error
		says       string
	}{
		{"newlines inflating to 256 MiB", "samples.csv.gz", func(w io.Writer) error {
			zw := gzip.NewWriter(w)
			fmt.Fprintln(zw, header)
			blank := bytes.Repeat([]byte("\n"), 1<<20)
			for range 256 {
				if _, err := zw.Write(blank); err != nil {
					return err
				}
			}
			return zw.Close()
		}, "holds more than the 67108864 bytes a run writes"},
		{"a line of 60 MB", "samples.csv", func(w io.Writer) error {
			fmt.Fprintln(w, header)
			_, err := w.Write(bytes.Repeat([]byte("7"), 60<<20))
			return err
		}, "line 2 is longer than 65536 bytes"},
		{"more rows than a run writes", "samples.csv", func(w io.Writer) error {
			bw := bufio.NewWriter(w)
			fmt.Fprintln(bw, header)
			_, row, _ := strings.Cut(strings.SplitN(string(samples), "\n", 3)[1], ",")
			for i := range 150_000 {
				fmt.Fprintf(bw, "%.1f,%s\n", float64(i+1)/10, row) // 100 ms apart, the shortest interval
			}
			return bw.Flush()
		}, "more than 144001 rows"},
		{"more process rows than a run writes", "processes.csv", func(w io.Writer) error {
			bw := bufio.NewWriter(w)
			fmt.Fprintln(bw, "elapsed_seconds,consumer,pid,comm,demand_bytes,resident_bytes,swap_bytes,working_set_bytes,major_faults_per_second,stall_percent")
			for i := range 310_000 {
				fmt.Fprintf(bw, "%.1f,%d,%d,consumer-%02d,9998336,19116032,0,-1,-1.000,-1.000\n", 10+float64(i/5)/10, i%5, 31269+i%5, i%5)
			}
			return bw.Flush()
		}, "more than 307200 rows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := t.TempDir()
			dir := filepath.Join(data, "runs", id)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "record.json"), record, 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.file != "samples.csv" && tc.file != "samples.csv.gz" {
				if err := os.WriteFile(filepath.Join(dir, "samples.csv"), samples, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			f, err := os.Create(filepath.Join(dir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.write(f); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], bin, "report", "--run", id, "--data.dir", data, "--out", filepath.Join(t.TempDir(), "out"))
			cmd.Env = append(os.Environ(), measureEnv+"=1")
			began := time.Now()
			b, err := cmd.CombinedOutput()
			took := time.Since(began)
			out, rss, _ := strings.Cut(string(b), "\nmaxrss ")
			peak, perr := strconv.Atoi(strings.TrimSpace(rss))
			if perr != nil {
				t.Fatalf("no peak RSS measured: %v\n%s", err, b)
			}
			t.Logf("%s: %s in %v, peak RSS %d KiB", tc.name, strings.TrimSpace(out), took.Round(time.Millisecond), peak)
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(out, tc.says) {
				t.Errorf("%v, %s: want exit 1 and %q", err, out, tc.says)
			}
			if peak > 100<<10 {
				t.Errorf("peak RSS %d KiB, want under 100 MB", peak)
			}
		})
	}
}

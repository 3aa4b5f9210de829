package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

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

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thrashscope/thrashscope/internal/testenv"
)

// observer report hands over to thrashtool beside it, whose messages then
// name the command as typed; without thrashtool it says what to install.
// The daemon's flat flags still parse.
func TestOfflineCommandsHandOver(t *testing.T) {
	testenv.Binary(t, "thrashtool")
	bin := testenv.Binary(t, "observer") // the same directory
	data := filepath.Join("..", "..", "internal", "report", "testdata", "data")
	const id = "20261122-032121-67c5ed"
	out := filepath.Join(t.TempDir(), "report")
	b, err := exec.Command(bin, "report", "--run", id, "--data.dir", data, "--out", out).CombinedOutput()
	if err != nil {
		t.Fatalf("observer report: %v\n%s", err, b)
	}
	if _, err := os.Stat(filepath.Join(out, id, "paper.png")); err != nil || !strings.Contains(string(b), "summary.txt") {
		t.Errorf("observer report drew no report: %v\n%s", err, b)
	}
	b, err = exec.Command(bin, "report", "--run", "nope", "--data.dir", data, "--out", out).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(b), `observer report: no run "nope"`) {
		t.Errorf("unknown run: %v\n%s", err, b)
	}

	// observer alone, with no thrashtool beside it or on PATH.
	alone := filepath.Join(t.TempDir(), "observer")
	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"report", "compare", "findings"} {
		cmd := exec.Command(alone, c)
		cmd.Env = append(os.Environ(), "PATH="+t.TempDir())
		b, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(b), "observer "+c+": needs thrashtool, beside observer or on PATH") {
			t.Errorf("observer %s without thrashtool: %v\n%s", c, err, b)
		}
	}

	// The daemon is the default command: its flags need no "serve".
	b, err = exec.Command(bin, "--web.listen-address=127.0.0.1:0", "--data.dir="+t.TempDir(), "--probes=procfs", "--bogus").CombinedOutput()
	if err == nil || !strings.Contains(string(b), "unknown long flag '--bogus'") {
		t.Errorf("flat daemon flags: %v\n%s", err, b)
	}
	// Its help lists the handed-over commands.
	if b, _ := exec.Command(bin, "--help").CombinedOutput(); !strings.Contains(string(b), "Runs thrashtool report") {
		t.Errorf("observer --help does not list report:\n%s", b)
	}
}

package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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

// --runtime.gogc sets the daemon's GOGC (Go's own gauge tells), GOGC in the
// environment stands when the flag is not given, and 0 is refused.
func TestRuntimeGOGC(t *testing.T) {
	bin := testenv.Binary(t, "observer")
	b, err := exec.Command(bin, "--runtime.gogc=0", "--probes=procfs").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(b), "--runtime.gogc=0: want 1 or more") {
		t.Errorf("--runtime.gogc=0: %v\n%s", err, b)
	}
	for _, tc := range []struct {
		env, flag string
		want      string
	}{
		{"", "", "go_gc_gogc_percent 50"},
		{"GOGC=80", "", "go_gc_gogc_percent 80"},
		{"GOGC=80", "--runtime.gogc=30", "go_gc_gogc_percent 30"},
	} {
		addr := freeAddr(t)
		args := []string{"--web.listen-address=" + addr, "--data.dir=" + t.TempDir(), "--probes=procfs", "--wss.interval=0"}
		if tc.flag != "" {
			args = append(args, tc.flag)
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "GOGC=")
		if tc.env != "" {
			cmd.Env = append(cmd.Env, tc.env)
		}
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		got, err := pollLine(addr, "go_gc_gogc_percent ", 10*time.Second)
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if err != nil || got != tc.want {
			t.Errorf("%s %s: %q, %v; want %q\n%s", tc.env, tc.flag, got, err, tc.want, out.String())
		}
	}
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// pollLine scrapes addr until /metrics answers, and returns its line that
// begins with prefix.
func pollLine(addr, prefix string, within time.Duration) (string, error) {
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK {
				for line := range strings.Lines(string(b)) {
					if strings.HasPrefix(line, prefix) {
						return strings.TrimSpace(line), nil
					}
				}
				return "", fmt.Errorf("no line %q in the scrape", prefix)
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no scrape within %s: %v", within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReleaseCode reads from the kernel (/proc/<pid>/smaps) how much of
// the daemon's binary is mapped once it is ready, with
// --runtime.release-code on (the default) and off: on, the pages that ran
// only to start are unmapped, and what maps back is what the sample loop
// and the scrapes run.
func TestReleaseCode(t *testing.T) {
	bin := testenv.Binary(t, "observer")
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	ino := st.Sys().(*syscall.Stat_t).Ino
	resident := map[bool]uint64{}
	for _, on := range []bool{true, false} {
		addr := freeAddr(t)
		args := []string{"--web.listen-address=" + addr, "--data.dir=" + t.TempDir(), "--probes=procfs", "--wss.interval=0", "--log.level=debug"}
		if !on {
			args = append(args, "--no-runtime.release-code")
		}
		cmd := exec.Command(bin, args...)
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		err := pollReady(addr, 10*time.Second)
		// On, the release at the first sample is logged once it is done.
		for deadline := time.Now().Add(5 * time.Second); err == nil && on && strings.Count(out.String(), "unmapped the binary's pages") < 2; {
			if time.Now().After(deadline) {
				err = fmt.Errorf("no second release logged within 5 s")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err == nil {
			resident[on], err = mappedKiB(cmd.Process.Pid, ino)
		}
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if err != nil {
			t.Fatalf("release-code %v: %v\n%s", on, err, out.String())
		}
		if got := strings.Count(out.String(), "unmapped the binary's pages"); (got > 0) != on {
			t.Errorf("release-code %v: %d releases logged\n%s", on, got, out.String())
		}
	}
	t.Logf("the binary's read-only pages mapped once ready: %d KiB released, %d KiB not", resident[true], resident[false])
	if resident[true]*5 > resident[false]*4 {
		t.Errorf("released, %d KiB of the binary mapped once ready; not, %d KiB: want under four fifths", resident[true], resident[false])
	}
}

// pollReady asks /readyz until it answers 200: the first sample is in.
func pollReady(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/readyz not 200 within %s (last: %v)", within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mappedKiB sums smaps' Rss over the read-only mappings of inode ino in
// process pid.
func mappedKiB(pid int, ino uint64) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0, err
	}
	var sum uint64
	var in bool
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && strings.Contains(f[3], ":"):
			in = f[4] == strconv.FormatUint(ino, 10) && !strings.Contains(f[1], "w")
		case in && len(f) == 3 && f[0] == "Rss:":
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("smaps: %q: %w", line, err)
			}
			sum += n
		}
	}
	if sum == 0 {
		return 0, fmt.Errorf("no read-only mapping of inode %d in /proc/%d/smaps", ino, pid)
	}
	return sum, nil
}

// syncBuffer is a strings.Builder safe to write from the child's output
// copiers while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

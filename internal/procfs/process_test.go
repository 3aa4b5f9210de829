package procfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/kernfile"

	"github.com/thrashscope/thrashscope/internal/testenv"
)

func TestProcess(t *testing.T) {
	loadgen := Process{
		PID: 4242, Comm: "loadgen", State: 'S', StartTicks: 21515,
		MinorFaults: 5000, MajorFaults: 300,
		UserSeconds: 2.5, SystemSeconds: 0.75,
		ResidentBytes: 25600 * pageSize,
		VirtualBytes:  1 << 30,
		SwapBytes:     512 << 20,
		// RssAnon + RssShmem, not its resident file pages.
		OwnResidentBytes: 98304 << 10,
	}
	loadgenStat := loadgen
	loadgenStat.SwapBytes, loadgenStat.OwnResidentBytes = 0, 0
	kthreadd := Process{PID: 2, Comm: "kthreadd", State: 'S', StartTicks: 6}
	sdPAM := Process{
		PID: 5151, Comm: "(sd-pam)", State: 'S', StartTicks: 3072,
		MinorFaults: 51, MajorFaults: 7,
		UserSeconds: 0.03, SystemSeconds: 0.02,
		ResidentBytes: 1024 * pageSize,
		VirtualBytes:  22122496,
	}

	tests := []struct {
		name     string
		pid      int
		full     bool // Process rather than ProcessStat
		want     Process
		wantGone bool
	}{
		{name: "user process", pid: 4242, full: true, want: loadgen},
		{name: "user process stat only", pid: 4242, want: loadgenStat},
		{name: "kernel thread has no VmSwap", pid: 2, full: true, want: kthreadd},
		{name: "comm in parens", pid: 5151, want: sdPAM},
		{name: "status vanished after stat", pid: 5151, full: true, wantGone: true},
		{name: "no directory", pid: 999, full: true, wantGone: true},
		{name: "no directory stat only", pid: 999, wantGone: true},
	}
	for _, path := range fixtures {
		fs := newTestFS(t, path)
		for _, tt := range tests {
			t.Run(path+"/"+tt.name, func(t *testing.T) {
				read := fs.ProcessStat
				if tt.full {
					read = fs.Process
				}
				got, err := read(tt.pid)
				if tt.wantGone != errors.Is(err, ErrProcessGone) || (!tt.wantGone && err != nil) {
					t.Fatalf("error = %v, want gone %v", err, tt.wantGone)
				}
				if got != tt.want {
					t.Errorf("got %+v, want %+v", got, tt.want)
				}
			})
		}
	}
}

// Reads that race with exit: the kernel can hand back an empty or cut file,
// and none of these may surface as a parse error or a half-filled Process.
func TestProcessVanishing(t *testing.T) {
	const stat = "100 (app) S 1 100 100 0 -1 4194560 10 0 2 0 5 5 0 0 20 0 1 0 500 4096 1 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
	const status = "Name:\tapp\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t100\nPid:\t100\nVmSwap:\t       4 kB\n"
	tests := []struct {
		name     string
		stat     string
		status   string
		full     bool
		wantGone bool
		wantErr  bool
	}{
		{name: "complete", stat: stat, status: status, full: true},
		{name: "empty stat", stat: "", wantGone: true},
		{name: "stat cut in comm", stat: "100 (ap", wantGone: true},
		{name: "stat cut after comm", stat: "100 (app)", wantGone: true},
		{name: "stat cut in fields", stat: "100 (app) S 1 100 100 0 -1 4194560 10", wantGone: true},
		{name: "empty status", stat: stat, status: "", full: true, wantGone: true},
		{name: "malformed stat", stat: "100 (app) S 1 100 100 0 -1 4194560 ten 0 2 0 5 5 0 0 20 0 1 0 500 4096 1 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{"100/stat": tt.stat}
			if tt.full {
				files["100/status"] = tt.status
			}
			fs := newTestFS(t, writeTree(t, files))
			read := fs.ProcessStat
			if tt.full {
				read = fs.Process
			}
			got, err := read(100)
			if gone := errors.Is(err, ErrProcessGone); gone != tt.wantGone {
				t.Fatalf("error = %v, want gone %v", err, tt.wantGone)
			}
			if (err != nil) != (tt.wantGone || tt.wantErr) {
				t.Fatalf("error = %v, want error %v", err, tt.wantGone || tt.wantErr)
			}
			if err != nil && got != (Process{}) {
				t.Errorf("got %+v with error, want zero Process", got)
			}
		})
	}
}

func TestPIDs(t *testing.T) {
	for _, path := range fixtures {
		got, err := newTestFS(t, path).PIDs()
		if err != nil {
			t.Fatal(err)
		}
		if want := []int{2, 4242, 5151}; !slices.Equal(got, want) {
			t.Errorf("%s: PIDs() = %v, want %v", path, got, want)
		}
	}
}

// TestRealProc reads the machine's own /proc; it needs no privileges.
func TestRealProc(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("no procfs at /proc: %v", err))
	}
	fs := newTestFS(t, "/proc")

	self := os.Getpid()
	p, err := fs.Process(self)
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != self || p.Comm == "" || p.ResidentBytes == 0 || p.VirtualBytes < p.ResidentBytes ||
		p.StartTicks == 0 || p.MinorFaults == 0 {
		t.Errorf("Process(self) = %+v, not sane", p)
	}

	pids, err := fs.PIDs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, self) || !slices.IsSorted(pids) {
		t.Errorf("PIDs() = %v, want sorted and holding %d", pids, self)
	}

	// A reaped child is the real vanished-process case.
	if path, err := exec.LookPath("true"); err == nil {
		cmd := exec.Command(path)
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		if _, err := fs.Process(cmd.Process.Pid); !errors.Is(err, ErrProcessGone) {
			t.Errorf("Process(reaped child) error = %v, want ErrProcessGone", err)
		}
	}

	if _, err := fs.CPU(); err != nil {
		t.Error(err)
	}
	if _, err := fs.VMStat(); err != nil {
		t.Error(err)
	}
	if m, err := fs.Memory(); err != nil || m.TotalBytes == 0 || m.AvailableBytes > m.TotalBytes {
		t.Errorf("Memory() = %+v, %v", m, err)
	}
	if _, err := fs.MemoryPressure(); err != nil && !errors.Is(err, ErrNoData) {
		t.Error(err)
	}
}

// A comm is whatever the process set, up to 15 bytes: spaces, parentheses
// and a ") " that looks like the end of it.
func TestParseStatComm(t *testing.T) {
	for _, comm := range []string{"a b", "x) S 1 (y", "))", "(", ""} {
		line := "7 (" + comm + ") S 1 7 7 0 -1 0 11 0 3 0 250 50 0 0 20 0 1 0 900 8192 2 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
		got, err := parseStat([]byte(line))
		want := Process{Comm: comm, State: 'S', StartTicks: 900, MinorFaults: 11, MajorFaults: 3, UserSeconds: 2.5, SystemSeconds: 0.5, ResidentBytes: 2 * pageSize, VirtualBytes: 8192}
		if err != nil || got != want {
			t.Errorf("comm %q: got %+v, %v; want %+v", comm, got, err, want)
		}
	}
}

// A name cut at 15 bytes inside a UTF-8 character, or set by the process to
// any bytes, comes out valid: each bad byte is U+FFFD.
func TestParseStatCommInvalidUTF8(t *testing.T) {
	for comm, want := range map[string]string{
		"dataproc-\xc3":        "dataproc-\uFFFD",
		"\xff\xfe":             "\uFFFD",
		"caf\xc3\xa9-worker-1": "café-worker-1",
	} {
		line := "7 (" + comm + ") S 1 7 7 0 -1 0 11 0 3 0 250 50 0 0 20 0 1 0 900 8192 2 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
		got, err := parseStat([]byte(line))
		if err != nil || got.Comm != want {
			t.Errorf("comm %q: got %q, %v; want %q", comm, got.Comm, err, want)
		}
	}
}

// BenchmarkProcessStat reads this process's stat as the sampler reads every
// process's on procfs alone.
func BenchmarkProcessStat(b *testing.B) {
	fs, err := NewFS("/proc")
	if err != nil {
		b.Fatal(err)
	}
	pid := os.Getpid()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fs.ProcessStat(pid); err != nil {
			b.Fatal(err)
		}
	}
}

// ProcessFrom reads what Process reads through files kept open: a child
// read again through the same files sees its state change, then is gone
// once reaped, and its files are closed.
func TestProcessFromKeptFiles(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("no procfs at /proc: %v", err))
	}
	fs := newTestFS(t, "/proc")
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	var files kernfile.Set
	defer files.Close()

	kept, err := fs.ProcessFrom(&files, pid)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := fs.Process(pid)
	if err != nil {
		t.Fatal(err)
	}
	if kept.PID != pid || kept.StartTicks != fresh.StartTicks || kept.StartTicks == 0 {
		t.Errorf("through kept files %+v, opened afresh %+v", kept, fresh)
	}
	if files.Len() != 2 {
		t.Errorf("%d files kept, want stat and status", files.Len())
	}
	// The same files again: a stopped process reads T, then not T.
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, &files, fs, pid, func(s byte) bool { return s == 'T' })
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitState(t, &files, fs, pid, func(s byte) bool { return s != 'T' })
	if files.Len() != 2 {
		t.Errorf("%d files kept after reading again, want the same 2", files.Len())
	}

	cmd.Process.Kill()
	_ = cmd.Wait()
	if _, err := fs.ProcessFrom(&files, pid); !errors.Is(err, ErrProcessGone) {
		t.Errorf("a reaped child through kept files: %v, want ErrProcessGone", err)
	}
	// Its stat is closed at the failed read, its status by the sweeps
	// that find it no longer read.
	files.Sweep()
	files.Sweep()
	if files.Len() != 0 {
		t.Errorf("%d files kept of a reaped process after two sweeps, want none", files.Len())
	}
}

func waitState(t *testing.T, files *kernfile.Set, fs FS, pid int, ok func(byte) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := fs.ProcessFrom(files, pid)
		if err != nil {
			t.Fatal(err)
		}
		if ok(p.State) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still in state %c after 5 s", pid, p.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ProcessStatFrom reads a process's stat alone through a kept file, as
// ProcessStat reads it afresh, and says a reaped process is gone.
func TestProcessStatFromKeptFile(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("no procfs at /proc: %v", err))
	}
	fs := newTestFS(t, "/proc")
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	var files kernfile.Set
	defer files.Close()
	for range 2 {
		kept, err := fs.ProcessStatFrom(&files, pid)
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := fs.ProcessStat(pid)
		if err != nil {
			t.Fatal(err)
		}
		if kept.PID != pid || kept.StartTicks != fresh.StartTicks || kept.StartTicks == 0 || kept.Comm != "sleep" {
			t.Errorf("through a kept file %+v, opened afresh %+v", kept, fresh)
		}
		if files.Len() != 1 {
			t.Errorf("%d files kept, want its stat alone", files.Len())
		}
	}
	cmd.Process.Kill()
	_ = cmd.Wait()
	if _, err := fs.ProcessStatFrom(&files, pid); !errors.Is(err, ErrProcessGone) {
		t.Errorf("a reaped child through a kept file: %v, want ErrProcessGone", err)
	}
}

// BenchmarkProcessStatFrom is BenchmarkProcessStat through a kept file: a
// run's consumer, checked once a second for its progress.
func BenchmarkProcessStatFrom(b *testing.B) {
	fs := newTestFS(b, "/proc")
	pid := os.Getpid()
	var files kernfile.Set
	defer files.Close()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fs.ProcessStatFrom(&files, pid); err != nil {
			b.Fatal(err)
		}
	}
}

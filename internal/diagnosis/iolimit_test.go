package diagnosis

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/workload"
)

// A thrashing group's use of its own I/O limit: its reads over the
// interval against the limit, the larger of I/Os and bytes, from its
// cgroup2 group where io is on there, else its processes' v1 blkio group;
// none at its first sample, or with no read limit.
func TestIOLimitUse(t *testing.T) {
	write := func(dir, name, text string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Unix(5000, 0)
	sample := func(s *Stage, w workload.Workload, pids []int, at time.Time) (float64, string) {
		s.files = newMemo()
		return s.ioLimitOf(w, pids, at)
	}

	v2 := filepath.Join(t.TempDir(), "run")
	write(v2, "io.max", "253:0 rbps=max wbps=max riops=120 wiops=120\n")
	write(v2, "io.stat", "253:0 rbytes=4096000 wbytes=0 rios=1000 wios=0 dbytes=0 dios=0\n")
	s := NewStage(StageConfig{})
	w := workload.Workload{Labels: workload.Labels{Cgroup: "/run"}, Files: workload.Files{V2: v2}}
	if pct, _ := sample(s, w, nil, t0); pct != -1 {
		t.Errorf("first sample: %v, want -1 (no rate yet)", pct)
	}
	write(v2, "io.stat", "253:0 rbytes=8192000 wbytes=0 rios=1234 wios=0 dbytes=0 dios=0\n")
	if pct, name := sample(s, w, nil, t0.Add(2*time.Second)); math.Abs(pct-97.5) > 1e-9 || name != "253:0 riops=120" {
		t.Errorf("117 reads a second against riops=120: %v %q, want 97.5 %% of 253:0 riops=120", pct, name)
	}
	// A sample it was not thrashing at keeps its rate, taken over the
	// gap; a long pause does not.
	write(v2, "io.stat", "253:0 rbytes=8192000 wbytes=0 rios=1474 wios=0 dbytes=0 dios=0\n")
	if pct, _ := sample(s, w, nil, t0.Add(4*time.Second)); math.Abs(pct-100) > 1e-9 {
		t.Errorf("thrashing again after a sample without: %v, want 100 (120 a second over the 2 s)", pct)
	}
	write(v2, "io.stat", "253:0 rbytes=8192000 wbytes=0 rios=9000 wios=0 dbytes=0 dios=0\n")
	if pct, _ := sample(s, w, nil, t0.Add(time.Minute)); pct != -1 {
		t.Errorf("thrashing again a minute later: %v, want -1 (no rate yet)", pct)
	}
	write(v2, "io.max", "")
	if pct, _ := sample(s, w, nil, t0.Add(61*time.Second)); pct != -1 {
		t.Errorf("the limit lifted: %v, want -1", pct)
	}

	// Memory on v1: the limit is on the processes' blkio group.
	root := t.TempDir()
	proc, blkio := filepath.Join(root, "proc"), filepath.Join(root, "blkio")
	write(filepath.Join(proc, "self"), "mountinfo", "30 25 0:26 / "+blkio+" rw - cgroup cgroup rw,blkio\n")
	write(filepath.Join(proc, "42"), "cgroup", "7:blkio:/thrashscope-run-x\n4:memory:/thrashscope-run-x\n0::/\n")
	g := filepath.Join(blkio, "thrashscope-run-x")
	for file, text := range map[string]string{"blkio.throttle.read_iops_device": "", "blkio.throttle.write_iops_device": "",
		"blkio.throttle.read_bps_device": "253:0 1048576\n", "blkio.throttle.write_bps_device": "",
		"blkio.throttle.io_serviced_recursive": "253:0 Read 10\nTotal 10\n", "blkio.throttle.io_service_bytes_recursive": "253:0 Read 0\nTotal 0\n"} {
		write(g, file, text)
	}
	s = NewStage(StageConfig{Proc: proc})
	w = workload.Workload{Labels: workload.Labels{Cgroup: "/thrashscope-run-x"}, Files: workload.Files{V2: filepath.Join(root, "unified-without-io")}}
	sample(s, w, []int{42}, t0)
	write(g, "blkio.throttle.io_service_bytes_recursive", "253:0 Read "+strconv.Itoa(512<<10)+"\nTotal 0\n")
	if pct, name := sample(s, w, []int{42}, t0.Add(time.Second)); math.Abs(pct-50) > 1e-9 || name != "253:0 rbps=1048576" {
		t.Errorf("512 KiB a second against 1 MiB: %v %q, want 50 %% of 253:0 rbps=1048576", pct, name)
	}
}

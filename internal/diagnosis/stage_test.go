package diagnosis

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/sampler"
	"github.com/thrashscope/thrashscope/internal/workload"
)

// The stage opens a diagnosis for a workload at thrashing from its own
// files (its limit, its processes) and the verdict's demands, names the
// neighbour that grew under the shared limit, and closes it when the
// workload calms, keeping it in the history.
func TestStageFollowsAThrash(t *testing.T) {
	root := t.TempDir()
	writeGroup(t, root, "pod", map[string]string{"memory.max": "1073741824", "memory.high": "max", "memory.current": "1073000000"})
	writeGroup(t, root, "pod/victim", map[string]string{"memory.max": "max", "memory.high": "max", "memory.current": "300000000", "cgroup.procs": "11"})
	writeGroup(t, root, "pod/victim/worker", map[string]string{"cgroup.procs": "12"}) // its processes in a group below
	writeGroup(t, root, "pod/neighbour", map[string]string{"memory.max": "max", "memory.high": "max", "memory.current": "400000000"})
	h, err := OpenHistory(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := NewStage(StageConfig{V2Mount: root, History: h})
	t0 := time.Unix(50_000, 0)
	victim := func(state int) workload.Workload {
		w := workload.Workload{Labels: workload.Labels{Cgroup: "/pod/victim", Unit: "victim.service"}, State: state, HasKernel: true,
			Files: workload.Files{V2: filepath.Join(root, "pod/victim"), V2Root: root}}
		w.Kernel = workload.ReadKernel(w.Files)
		w.Kernel.SwapBytes = 400 * mi
		return w
	}
	tick := func(sec int, state int) *pipeline.Tick {
		return &pipeline.Tick{
			Reading: &sampler.Reading{Time: t0.Add(time.Duration(sec) * time.Second), Memory: procfs.Memory{TotalBytes: 24 << 30, AvailableBytes: 20 << 30}},
			Verdict: &indicators.Verdict{State: indicators.Normal, Processes: map[int]indicators.ProcessVerdict{
				11: {DemandBytes: uint64(200 * mi), HasWorkingSet: true}, 12: {DemandBytes: uint64(300 * mi), HasWorkingSet: true}, 99: {DemandBytes: uint64(mi), HasWorkingSet: true},
			}},
			Workloads: []workload.Workload{victim(state)},
		}
	}
	s.Observe(nil, tick(0, indicators.Monitoring))
	if len(s.Open()) != 0 {
		t.Fatal("opened at monitoring")
	}
	if s.CPUSeconds() <= 0 {
		t.Errorf("CPU %v s after a sample that read its limits, want its thread's time counted", s.CPUSeconds())
	}
	writeGroup(t, root, "pod/neighbour", map[string]string{"memory.current": "700000000"})
	s.Observe(nil, tick(30, indicators.Thrashing))
	open := s.Open()
	if len(open) != 1 {
		t.Fatalf("open %+v, want the victim's", open)
	}
	d := open[0]
	if d.Binding == nil || d.Binding.Kind != LimitAncestor || d.Binding.Group != "/pod" {
		t.Errorf("binding %+v, want /pod's limit", d.Binding)
	}
	// The others hold 1,073,000,000 − 300 MiB of the 1 GiB; the victim's
	// processes demand 500 MiB.
	room := 1024*mi - (1073000000 - 300000000)
	if want := 500*mi - room; d.Shortfall.Bytes != want {
		t.Errorf("shortfall %d, want %d", d.Shortfall.Bytes, want)
	}
	if d.Culprit == nil || d.Culprit.Group != "/pod/neighbour" || d.Culprit.GrewBytes != 300000000 {
		t.Errorf("culprit %+v, want /pod/neighbour grown 300 MB", d.Culprit)
	}
	if !strings.Contains(d.Summary, "victim.service") || !strings.Contains(d.Summary, "/pod/neighbour grew") {
		t.Errorf("summary %q", d.Summary)
	}
	s.Observe(nil, tick(31, indicators.Monitoring))
	if len(s.Open()) != 0 || len(s.History()) != 1 || s.History()[0].Closed == nil {
		t.Fatalf("after it calmed: open %d, history %+v", len(s.Open()), s.History())
	}
	if got := s.History()[0].Ended; !strings.HasPrefix(got, "its pressure eased") {
		t.Errorf("ended: %q, want its pressure eased (its group, limits, processes and demand all still there)", got)
	}
	// Thrashing again, then its parent's limit raised: it thrashes a
	// sample more before it calms.
	s.Observe(nil, tick(32, indicators.Thrashing))
	writeGroup(t, root, "pod", map[string]string{"memory.max": "2147483648"})
	s.Observe(nil, tick(33, indicators.Thrashing))
	s.Observe(nil, tick(34, indicators.Monitoring))
	if h := s.History(); len(h) != 2 || !strings.Contains(h[1].Ended, "memory.max changed from 1.0 GiB to 2.0 GiB") {
		var ended []string
		for _, d := range h {
			ended = append(ended, d.Ended)
		}
		t.Errorf("after the parent's limit was raised: ended %q, want the second diagnosis ended by the limit's change", ended)
	}
	// Thrashing again under the first limit, the neighbour named; it gives
	// back what it took while the group still thrashes a sample.
	writeGroup(t, root, "pod", map[string]string{"memory.max": "1073741824"})
	s.Observe(nil, tick(35, indicators.Thrashing))
	if o := s.Open(); len(o) != 1 || o[0].Culprit == nil {
		t.Fatalf("thrashing again: %+v, want the neighbour named", o)
	}
	writeGroup(t, root, "pod/neighbour", map[string]string{"memory.current": "100000000"})
	s.Observe(nil, tick(36, indicators.Thrashing))
	s.Observe(nil, tick(37, indicators.Monitoring))
	if h := s.History(); len(h) != 3 || !strings.Contains(h[2].Ended, "/pod/neighbour gave back") {
		t.Errorf("after the neighbour gave back: %d closed, the last ended %q; want it ended by the neighbour's giving back", len(h), h[len(h)-1].Ended)
	}
}

// A workload's own limits and charge, as the workload's stage read them,
// are what its limits read from the files: v2 and v1, set and unlimited,
// and a file the workload could not read is read by the diagnosis.
func TestSeededLimitsAreTheFiles(t *testing.T) {
	root := t.TempDir()
	writeGroup(t, root, "a", map[string]string{"memory.max": "1073741824", "memory.high": "max", "memory.current": "1000000000"})
	writeGroup(t, root, "a/b", map[string]string{"memory.max": "max", "memory.high": "536870912", "memory.current": "530000000", "memory.pressure": "", "memory.events": "", "memory.stat": ""})
	writeGroup(t, root, "v1/c", map[string]string{"memory.limit_in_bytes": "9223372036854771712", "memory.usage_in_bytes": "4096", "memory.stat": ""})
	writeGroup(t, root, "v1/d", map[string]string{"memory.limit_in_bytes": "104857600", "memory.usage_in_bytes": "104000000", "memory.stat": ""})
	for _, c := range []struct {
		h     Hierarchy
		group string
		files workload.Files
	}{
		{Hierarchy{Mount: root, V2: true}, "/a/b", workload.Files{V2: filepath.Join(root, "a/b"), V2Root: root}},
		{Hierarchy{Mount: filepath.Join(root, "v1")}, "/c", workload.Files{V1Memory: filepath.Join(root, "v1/c")}},
		{Hierarchy{Mount: filepath.Join(root, "v1")}, "/d", workload.Files{V1Memory: filepath.Join(root, "v1/d")}},
	} {
		want, err := c.h.Limits(newMemo(), c.group)
		if err != nil {
			t.Fatal(err)
		}
		seeded := newMemo()
		seeded.seed(c.files, workload.ReadKernel(c.files))
		if own := map[bool]int{true: 3, false: 2}[c.h.V2]; len(seeded.m) != own {
			t.Errorf("%s: %d of its own files seeded, want %d", c.group, len(seeded.m), own)
		}
		got, err := c.h.Limits(seeded, c.group)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: seeded %+v, read %+v", c.group, got, want)
		}
	}
	// memory.high unreadable to the workload's stage: read again, and the
	// error said.
	writeGroup(t, root, "e", map[string]string{"memory.max": "max", "memory.current": "1"})
	f := workload.Files{V2: filepath.Join(root, "e"), V2Root: root}
	seeded := newMemo()
	seeded.seed(f, workload.ReadKernel(f))
	if _, err := (Hierarchy{Mount: root, V2: true}).Limits(seeded, "/e"); err == nil || !strings.Contains(err.Error(), "memory.high") {
		t.Errorf("memory.high missing: %v, want an error naming it", err)
	}
}

// The host's detector at thrashing opens the host's diagnosis only when no
// workload at its own limit explains it.
func TestStageHostDiagnosis(t *testing.T) {
	root := t.TempDir()
	writeGroup(t, root, "run", map[string]string{"memory.max": "104857600", "memory.high": "max", "memory.current": "104000000"})
	s := NewStage(StageConfig{V2Mount: root})
	t0 := time.Unix(70_000, 0)
	tick := func(sec int, workloads ...workload.Workload) *pipeline.Tick {
		return &pipeline.Tick{
			Reading:   &sampler.Reading{Time: t0.Add(time.Duration(sec) * time.Second), Memory: procfs.Memory{TotalBytes: 24 << 30, AvailableBytes: 20 << 30}},
			Verdict:   &indicators.Verdict{State: indicators.Thrashing},
			Workloads: workloads,
		}
	}
	run := workload.Workload{Labels: workload.Labels{Cgroup: "/run"}, State: indicators.Monitoring, Files: workload.Files{V2: filepath.Join(root, "run")}}
	s.Observe(nil, tick(0, run))
	if open := s.Open(); len(open) != 0 {
		t.Errorf("a run at its own limit explains the host's thrash, yet open: %+v", open)
	}
	s.Observe(nil, tick(1))
	open := s.Open()
	if len(open) != 1 || open[0].Group != "" || open[0].Binding != nil || !strings.Contains(open[0].NoBinding, "no limit binds") {
		t.Errorf("the host thrashing with nothing to explain it: %+v, want the host's diagnosis saying no limit binds", open)
	}
}

// BenchmarkStageObserve is one sample of the stage through a run like e4
// at scale 0.1 as the observer names its workloads: 25 consumers' groups,
// each thrashing with one process, under the run's group and its limit.
func BenchmarkStageObserve(b *testing.B) {
	root := b.TempDir()
	writeGroup(b, root, "run", map[string]string{"memory.max": "107372544", "memory.high": "max", "memory.current": "107000000", "memory.swap.max": "max"})
	verdict := &indicators.Verdict{State: indicators.Thrashing, Processes: map[int]indicators.ProcessVerdict{}}
	var workloads []workload.Workload
	for i := range 25 {
		name := fmt.Sprintf("run/c%d", i)
		writeGroup(b, root, name, map[string]string{"memory.max": "max", "memory.high": "max", "memory.current": "4000000", "memory.swap.max": "max",
			"cgroup.procs": fmt.Sprint(1000 + i), "cgroup.stat": "nr_descendants 0\nnr_dying_descendants 0", "memory.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
			"memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n", "memory.stat": "pgmajfault 0\n", "memory.swap.current": "0"})
		f := workload.Files{V2: filepath.Join(root, name), V2Root: root}
		workloads = append(workloads, workload.Workload{Labels: workload.Labels{Cgroup: "/" + name}, State: indicators.Thrashing, HasKernel: true, Files: f, Kernel: workload.ReadKernel(f)})
		verdict.Processes[1000+i] = indicators.ProcessVerdict{DemandBytes: 10 << 20, HasWorkingSet: true}
	}
	s := NewStage(StageConfig{V2Mount: root})
	t0 := time.Unix(80_000, 0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Observe(nil, &pipeline.Tick{
			Reading:   &sampler.Reading{Time: t0.Add(time.Duration(i) * time.Second), Memory: procfs.Memory{TotalBytes: 24 << 30, AvailableBytes: 20 << 30}},
			Verdict:   verdict,
			Workloads: workloads,
		})
	}
	if len(s.Open()) != 25 {
		b.Fatalf("%d open, want the 25 groups'", len(s.Open()))
	}
}

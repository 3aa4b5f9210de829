package diagnosis

import (
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
		w.Kernel.CurrentBytes, w.Kernel.SwapBytes = 300*mi, 400*mi
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
	room := 1024*mi - (1073000000 - 300*mi)
	if want := 500*mi - room; d.Shortfall.Bytes != want {
		t.Errorf("shortfall %d, want %d", d.Shortfall.Bytes, want)
	}
	if d.Culprit == nil || d.Culprit.Group != "/pod/neighbour" || d.Culprit.GrewBytes != 300000000 {
		t.Errorf("culprit %+v, want /pod/neighbour grown 300 MB", d.Culprit)
	}
	if !strings.Contains(d.Summary, "victim.service") || !strings.Contains(d.Summary, "/pod/neighbour grew") {
		t.Errorf("summary %q", d.Summary)
	}
	s.Observe(nil, tick(31, indicators.Normal))
	if len(s.Open()) != 0 || len(s.History()) != 1 || s.History()[0].Closed == nil {
		t.Errorf("after it calmed: open %d, history %+v", len(s.Open()), s.History())
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

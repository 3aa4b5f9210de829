package main

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/testenv"
)

// heldRounds and heldFactor: make test's short form of the per-fault
// figure, three windows of file major faults, fails past twice the median
// bench/README commits for the fast way.
const (
	heldRounds = 3
	heldFactor = 2.0
)

// committedFileMajor is the fast way's filemajor median in bench/README's
// table of the two ways, in ns per major fault.
func committedFileMajor(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?m)^\\| `filemajor`[^|]*\\| [^|]*\\(median ([0-9,]+)\\)").FindSubmatch(b)
	if m == nil {
		t.Fatal("bench/README.md has no fast-way filemajor median (\"| `filemajor` ... | ... (median N) |\") in its table of the two ways")
	}
	ns, err := strconv.ParseFloat(strings.ReplaceAll(string(m[1]), ",", ""), 64)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// TestBPFTimePerMajorFaultHeld is bench/overhead's figure that matters most
// on a thrashing host, held in make test: the real observer's BPF time, all
// its programs together (bpf_stats), per major fault of a file read a page
// at a time from a dropped cache, median of three short windows, within
// twice the committed median. A change that doubles what every fault
// pays fails here; make bench measures it finely.
func TestBPFTimePerMajorFaultHeld(t *testing.T) {
	testenv.RequirePrivileged(t)
	committed := committedFileMajor(t)
	exe := testBinary(t)
	b := &bench{
		cfg: config{
			ObserverBin: testenv.Binary(t, "observer"), ProbesWay: "fast",
			Duration: 2 * time.Second, Warmup: 500 * time.Millisecond, Settle: time.Second,
			ReadyTimeout: 30 * time.Second, StopTimeout: 10 * time.Second, ProcRoot: "/proc", Exe: exe,
		},
		logger:         quietLogger(),
		ticksPerSecond: clockTicksPerSecond(),
	}
	floor, err := measureFloor(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var perFault, runs []float64
	for round := range heldRounds {
		_, br, _, err := b.observedPhase(context.Background(), "filemajor")
		if err != nil {
			t.Fatalf("round %d: %v", round+1, err)
		}
		if br.Ops == 0 {
			t.Fatalf("round %d: no major faults", round+1)
		}
		ns := float64(totalRunTimeNs(br.Programs)) / float64(br.Ops)
		t.Logf("round %d: %d major faults, %.0f ns of BPF a fault (%v)", round+1, br.Ops, ns, br.Programs)
		perFault = append(perFault, ns)
		var n uint64
		for _, p := range br.Programs {
			n += p.Runs
		}
		runs = append(runs, float64(n)/float64(br.Ops))
	}
	slices.Sort(perFault)
	slices.Sort(runs)
	median := perFault[len(perFault)/2]
	testenv.Figure(t, "BPF per major fault, filemajor, fast way", "%.0f ns (committed median %.0f); the floor %.0f ns a run, %.1f runs a fault, a clock read %.0f ns", median, committed, floor.NsPerRun, runs[len(runs)/2], floor.ClockNs)
	if median > heldFactor*committed {
		t.Errorf("BPF time per major fault %.0f ns (median of %v), more than %.0f× the committed %.0f ns (bench/README): what every fault of a thrash pays has grown; measure it with go run ./bench/overhead --workloads filemajor,swapin", median, perFault, heldFactor, committed)
	}
}

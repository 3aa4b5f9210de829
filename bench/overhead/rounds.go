package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/thrashscope/thrashscope/internal/cgroup"
)

// config is the validated command line.
type config struct {
	ObserverBin  string
	ProbesWay    string // the observer's --probes.way
	Rounds       int
	Duration     time.Duration
	Warmup       time.Duration
	Settle       time.Duration // after /readyz, before the window opens
	ReadyTimeout time.Duration
	StopTimeout  time.Duration
	Workloads    []string
	BaselineOnly bool
	JSONPath     string
	ProcRoot     string
	Exe          string // this binary, re-run as each workload child
	Curves       curveConfig
}

// bench runs the measurement plan: per workload, rounds of one baseline
// and one observed phase, each a fresh workload child.
type bench struct {
	cfg            config
	logger         *slog.Logger
	ticksPerSecond uint64
	openBPFStats   openBPFStatsFunc // nil: the kernel's, openKernelBPFStats
}

// run measures everything and returns the figures. The observer's idle
// cost is taken first, while nothing else runs.
func (b *bench) run(ctx context.Context) (*report, error) {
	rep := &report{Config: b.reportConfig()}
	if !b.cfg.BaselineOnly {
		b.logger.Info("measuring the idle observer", "duration", b.cfg.Duration)
		idle, err := b.idlePhase(ctx)
		if err != nil {
			return nil, fmt.Errorf("idle phase: %w", err)
		}
		fig := idle.figures(b.ticksPerSecond)
		rep.Idle = &fig
		floor, err := measureFloor(b.cfg.Duration)
		if err != nil {
			return nil, fmt.Errorf("the BPF statistics' floor: %w", err)
		}
		b.logger.Info("the BPF statistics' floor", "ns_per_run", fmt.Sprintf("%.1f", floor.NsPerRun), "runs", floor.Runs)
		rep.Floor = &floor
	}
	for _, name := range b.cfg.Workloads {
		var baseline, observed []float64
		var bpf []bpfRound
		var cost selfCost
		for round := range b.cfg.Rounds {
			for _, obs := range phaseOrder(round) {
				if obs && b.cfg.BaselineOnly {
					continue
				}
				log := b.logger.With("workload", name, "round", fmt.Sprintf("%d/%d", round+1, b.cfg.Rounds), "condition", condition(obs))
				if !obs {
					res, err := b.runChild(ctx, name, nil, nil)
					if err != nil {
						return nil, fmt.Errorf("%s round %d baseline: %w", name, round+1, err)
					}
					baseline = append(baseline, res.OpsPerSec)
					log.Info("phase done", "ops_per_sec", int64(res.OpsPerSec))
					continue
				}
				res, br, c, err := b.observedPhase(ctx, name)
				if err != nil {
					return nil, fmt.Errorf("%s round %d observed: %w", name, round+1, err)
				}
				observed = append(observed, res.OpsPerSec)
				bpf = append(bpf, br)
				cost = cost.add(c)
				log.Info("phase done", "ops_per_sec", int64(res.OpsPerSec), "observer_cpu_ticks", c.CPUTicks,
					"bpf_time_per_op", fmt.Sprintf("%.2f%%", br.AttributedPercent))
			}
		}
		rep.Workloads = append(rep.Workloads, newWorkloadReport(name, baseline, observed, bpf, cost, b.ticksPerSecond))
	}
	rep.Targets = evaluateTargets(rep)
	return rep, nil
}

// phaseOrder alternates which condition goes first (ABBA), so a drift over
// the run, such as a warming host, does not always favour one side.
func phaseOrder(round int) []bool {
	if round%2 == 0 {
		return []bool{false, true}
	}
	return []bool{true, false}
}

func condition(observed bool) string {
	if observed {
		return "observed"
	}
	return "baseline"
}

// observedPhase starts an observer, runs one workload child under it and
// measures, over the child's measured window, the kernel's run time of the
// observer's BPF programs and the observer's own cost. BPF statistics are on
// from the observer's settling until the child is done, never in baseline
// phases.
func (b *bench) observedPhase(ctx context.Context, name string) (res workloadResult, bpf bpfRound, cost selfCost, err error) {
	obs, err := startObserver(ctx, b.cfg.ObserverBin, b.cfg.ProbesWay, b.cfg.ReadyTimeout, b.cfg.Settle, b.logger)
	if err != nil {
		return res, bpf, cost, err
	}
	defer func() {
		if stopErr := obs.stop(b.cfg.StopTimeout, b.logger); stopErr != nil && err == nil {
			err = stopErr
		}
	}()
	// Opened before the window, so that its edges cost one read per program.
	open := b.openBPFStats
	if open == nil {
		open = openKernelBPFStats
	}
	progs, err := open(b.cfg.ProcRoot, obs.pid(), b.logger)
	if err != nil {
		return res, bpf, cost, err
	}
	defer progs.Close()

	var sampler *selfCostSampler
	var before, after countersSnapshot
	var costErr, statsErr error
	res, err = b.runChild(ctx, name,
		func() {
			before, statsErr = progs.snapshot()
			sampler, costErr = startSelfCost(b.cfg.ProcRoot, obs.pid())
		},
		func() {
			if before != nil {
				after, statsErr = progs.snapshot()
			}
			if sampler != nil {
				cost, costErr = sampler.finish()
				sampler = nil
			}
		})
	if sampler != nil { // the child failed inside its window
		_, _ = sampler.finish()
	}
	if aliveErr := obs.alive(); aliveErr != nil {
		return res, bpf, cost, aliveErr
	}
	if err != nil {
		return res, bpf, cost, err
	}
	if costErr != nil {
		return res, bpf, cost, costErr
	}
	if statsErr != nil {
		return res, bpf, cost, statsErr
	}
	bpf, err = newBPFRound(res, before, after)
	return res, bpf, cost, err
}

// idlePhase measures the observer with no workload for one duration.
func (b *bench) idlePhase(ctx context.Context) (cost selfCost, err error) {
	obs, err := startObserver(ctx, b.cfg.ObserverBin, b.cfg.ProbesWay, b.cfg.ReadyTimeout, b.cfg.Settle, b.logger)
	if err != nil {
		return cost, err
	}
	defer func() {
		if stopErr := obs.stop(b.cfg.StopTimeout, b.logger); stopErr != nil && err == nil {
			err = stopErr
		}
	}()
	sampler, err := startSelfCost(b.cfg.ProcRoot, obs.pid())
	if err != nil {
		return cost, err
	}
	select {
	case <-time.After(b.cfg.Duration):
	case <-ctx.Done():
		_, _ = sampler.finish()
		return cost, ctx.Err()
	}
	cost, err = sampler.finish()
	if aliveErr := obs.alive(); aliveErr != nil {
		return cost, aliveErr
	}
	return cost, err
}

// runChild runs one workload in a fresh process. started is called when the
// child's measured window opens, finished as soon as its result arrives;
// either may be nil.
func (b *bench) runChild(ctx context.Context, name string, started, finished func()) (res workloadResult, err error) {
	args := []string{workloadCommand, name, "--warmup", b.cfg.Warmup.String(), "--duration", b.cfg.Duration.String()}
	if limit := cgroupLimits[name]; limit > 0 {
		cg, err := workloadCgroup(limit)
		if err != nil {
			return res, err
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = errors.Join(err, cg.Destroy(dctx))
		}()
		args = append(args, "--cgroup", cg.Path)
	}
	return b.runChildArgs(ctx, name, args, started, finished)
}

// workloadCgroups numbers the cgroups one benchmark makes.
var workloadCgroups atomic.Int64

// workloadCgroup makes a memory cgroup for one workload child beneath the
// benchmark's own; the caller destroys it.
func workloadCgroup(limit int64) (*cgroup.Cgroup, error) {
	parent, err := cgroup.Own("/proc")
	if err == nil {
		err = parent.Check()
	}
	if err != nil {
		return nil, fmt.Errorf("the swapin workload runs in a memory cgroup of its own: %w", err)
	}
	return parent.Create(fmt.Sprintf("bench-%d-%d", os.Getpid(), workloadCgroups.Add(1)), cgroup.Limits{MemoryBytes: limit})
}

func (b *bench) runChildArgs(ctx context.Context, name string, args []string, started, finished func()) (workloadResult, error) {
	cmd := exec.CommandContext(ctx, b.cfg.Exe, args...)
	stderr := newTailBuffer(8 << 10)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return workloadResult{}, err
	}
	if err := cmd.Start(); err != nil {
		return workloadResult{}, fmt.Errorf("starting workload child: %w", err)
	}
	var res *workloadResult
	var parseErr error
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		start, r, err := parseChildLine(sc.Text())
		switch {
		case err != nil:
			parseErr = errors.Join(parseErr, err)
		case start && started != nil:
			started()
		case r != nil:
			res = r
			if finished != nil {
				finished()
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		return workloadResult{}, fmt.Errorf("workload child: %w; its output:\n%s", err, stderr)
	}
	if parseErr != nil {
		return workloadResult{}, parseErr
	}
	if res == nil {
		return workloadResult{}, errors.New("workload child printed no result")
	}
	if res.Workload != name || res.Ops == 0 || res.Seconds <= 0 {
		return workloadResult{}, fmt.Errorf("workload child result %+v is empty or not for %s", *res, name)
	}
	return *res, nil
}

// parseChildLine reads one line of the child protocol: the start marker, or
// the JSON result.
func parseChildLine(line string) (start bool, res *workloadResult, err error) {
	line = strings.TrimSpace(line)
	if line == childStartLine {
		return true, nil, nil
	}
	var r workloadResult
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return false, nil, fmt.Errorf("unexpected line from workload child %q: %w", line, err)
	}
	return false, &r, nil
}

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const mib = 1 << 20

// scenario is one labelled workload: a thrash, with a known onset, that
// every alert should catch, or a benign load that none should alarm on.
// It is either a run induced over the observer's API (spec) or one of the
// bench's own workloads (custom).
type scenario struct {
	name, what string
	thrash     bool
	// quick ones also run in make test (TestScenarios).
	quick bool
	// zram: swap goes to a zram device while it runs.
	zram bool
	// spec is a run to induce; bound is how long past its planned onset
	// it is watched before it is aborted (0: until it ends, at most 10m).
	spec  string
	bound time.Duration
	// custom prepares the bench's own workload, whose begin starts it.
	custom func(ctx context.Context, e *env) (*job, error)
	// hostWide: the host detector applies, and must reach thrashing
	// within maxHost (it follows TPF: swap-ins by two processes or more,
	// so a page-cache thrash and a process alone are the workload's).
	hostWide bool
	// floor is what a benign load must make the kernel count, or it did
	// not do what its label says.
	floor floor
}

// floor is about half of what a benign load sets out to make the kernel
// count: below it the load did not happen as its label says (its file
// still cached, a process that never started), and "no alarm" on it would
// say nothing.
type floor struct {
	majorFaults, swapIns, swapOuts uint64
	readMiB, peakMiB               int64
}

func (f floor) String() string {
	var parts []string
	for _, p := range []struct {
		n    int64
		what string
	}{{int64(f.majorFaults), "major faults"}, {int64(f.swapIns), "swap-ins"}, {int64(f.swapOuts), "swap-outs"},
		{f.readMiB, "MiB read from disk"}, {f.peakMiB, "MiB held at its peak"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return "at least " + strings.Join(parts, ", ")
}

// check says what of the floor an observation did not reach.
func (f floor) check(o *observation) error {
	k := o.Kernel
	var short []string
	for _, c := range []struct {
		got, want int64
		what      string
	}{{int64(k.MajorFaults), int64(f.majorFaults), "major faults"}, {int64(k.SwapIns), int64(f.swapIns), "swap-ins"},
		{int64(k.SwapOuts), int64(f.swapOuts), "swap-outs"}, {int64(k.ReadKiB >> 10), f.readMiB, "MiB read from disk"},
		{o.PeakBytes >> 20, f.peakMiB, "MiB held at its peak"}} {
		if c.got < c.want {
			short = append(short, fmt.Sprintf("%d %s, not %d", c.got, c.what, c.want))
		}
	}
	if len(short) > 0 {
		return fmt.Errorf("the load did not do what its label says: the kernel counted %s", strings.Join(short, "; "))
	}
	return nil
}

// e4 is the e4 load of bench/detection and the README's figures.
const e4 = `"preset":"e4","scale":0.1,"writes_per_cycle":10000`

// scenarios is the suite, in the order it runs.
var scenarios = []scenario{
	{name: "e4", thrash: true, quick: true, hostWide: true, what: "Maziero et al. (2013) e4 at scale 0.1: 25 consumers of 10 MB, one a second, in 102 MiB (anon, random fill)",
		spec: "{" + e4 + "}"},
	{name: "file", thrash: true, what: "e4 with backing=file: the consumers' regions are files, thrashing the page cache",
		spec: "{" + e4 + `,"backing":"file"}`},
	{name: "shmem", thrash: true, hostWide: true, what: "4 processes writing at random into one 160 MiB shared-memory buffer (memfd) in 96 MiB",
		custom: sharedBuffer},
	{name: "hdd-2013", thrash: true, hostWide: true, what: "e4 on the emulated 7,200 rpm disk (swap_device hdd-2013: 120 reads a second)",
		spec: "{" + e4 + `,"swap_device":{"profile":"hdd-2013"}}`, bound: 90 * time.Second},
	{name: "zram", thrash: true, zram: true, hostWide: true, what: "e4 with swap on zram (lz4), ahead of the host's swap",
		spec: "{" + e4 + "}"},
	{name: "alone", thrash: true, quick: true, what: "one process of 200 MB in random access alone in 128 MiB (pair with consumers 1)",
		spec: `{"preset":"pair","consumers":1,"memory_limit_bytes":134217728,"cycles":400}`, bound: 60 * time.Second},
	{name: "slow", thrash: true, hostWide: true, what: "e4 with a consumer every 4 s: demand climbs for 50 s, then past the limit 10 MB at a time",
		spec: "{" + e4 + `,"interval":"4s"}`, bound: 60 * time.Second},
	{name: "slow-20", thrash: true, hostWide: true, what: "e4 with a consumer every 40 s: demand past the limit from 6m50s, 20 minutes of thrash, the length node-mixin's 15-minute hold needs",
		spec: "{" + e4 + `,"interval":"40s"}`, bound: 20 * time.Minute},

	{name: "mmap-scan", quick: true, what: "2 processes scan a cold 1 GiB file through mmap, every page, three times over (readahead off), in 256 MiB: each pass reads it all from disk again",
		custom: scanFile, floor: floor{majorFaults: 3 * (1 << 30) / 4096 / 2}},
	{name: "backup", what: "read(2) of a cold 1 GiB tree of 256 files, in 256 MiB",
		custom: backup, floor: floor{readMiB: 512}},
	{name: "rewrite", what: "2 processes of 96 MiB rewriting their memory at random for 40 s, in 256 MiB",
		custom: rewrite, floor: floor{peakMiB: 160}},
	{name: "storm", what: "30 processes started at once, each from a cold copy of a binary, reading its own cold 8 MiB library through mmap and filling 16 MiB",
		custom: startStorm, floor: floor{majorFaults: 30 * stormLib / 4096 / 2}},
	{name: "readback", quick: true, what: "2 idle processes, each in its own group, reading back 128 MiB from swap at the same moment, in random order",
		custom: readbackPair, floor: floor{swapIns: 2 * 128 * mib / 4096 / 2}},
	{name: "zram-light", zram: true, what: "160 MiB in 128 MiB on zram: 96 MiB rewritten, 20 cold pages a second read back",
		custom: zramLight, floor: floor{swapIns: 20 * 40 / 2, swapOuts: 32 * mib / 4096 / 2}},
	{name: "reclaim", what: "192 MiB (64 MiB hot) in 512 MiB, 64 MiB proactively reclaimed every 10 s",
		custom: proactiveReclaim, floor: floor{swapOuts: 128 * mib / 4096 / 2}},
}

// job is a started scenario: when demand passes the limit (thrash), the
// cgroup that should be named, and how it ends.
type job struct {
	begin  func() (onset time.Time, err error)
	target string                      // a cgroup path suffix
	wait   func(context.Context) error // returns when it is over
	stop   func()
	peak   func() (int64, error) // the most memory its groups held
}

func sharedBuffer(ctx context.Context, e *env) (*job, error) {
	g, err := e.group("shmem", 96*mib)
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("thrashscope-bench-shmem", 0)
	if err != nil {
		g.destroy()
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "memfd")
	if err := f.Truncate(160 * mib); err != nil {
		f.Close()
		g.destroy()
		return nil, err
	}
	j, err := e.spawn(g, 4, func(int) []string { return []string{"touch", "size=" + strconv.Itoa(160*mib), "shared=1", "for=60s"} }, f)
	f.Close() // the children hold it
	if err != nil {
		return nil, err
	}
	// The buffer fills as it is written at random: the thrash begins when
	// the group first meets its limit.
	j.begin = g.whenFull(j.begin)
	return j, nil
}

func scanFile(ctx context.Context, e *env) (*job, error) {
	file, err := e.coldFile("scan", 1<<30)
	if err != nil {
		return nil, err
	}
	g, err := e.group("mmap-scan", 256*mib)
	if err != nil {
		return nil, err
	}
	return e.spawn(g, 2, func(i int) []string {
		return []string{"mmapscan", "file=" + file, "offset=" + strconv.Itoa(i*512*mib), "length=" + strconv.Itoa(512*mib), "passes=3"}
	})
}

func backup(ctx context.Context, e *env) (*job, error) {
	dir := filepath.Join(e.tmp, "tree")
	for i := range 256 {
		if _, err := e.coldFileAt(filepath.Join(dir, fmt.Sprintf("d%02d", i%16), fmt.Sprintf("f%03d", i)), 4*mib); err != nil {
			return nil, err
		}
	}
	g, err := e.group("backup", 256*mib)
	if err != nil {
		return nil, err
	}
	return e.spawn(g, 1, func(int) []string { return []string{"readtree", "dir=" + dir} })
}

func rewrite(ctx context.Context, e *env) (*job, error) {
	g, err := e.group("rewrite", 256*mib)
	if err != nil {
		return nil, err
	}
	return e.spawn(g, 2, func(int) []string { return []string{"touch", "size=" + strconv.Itoa(96*mib), "for=40s"} })
}

func startStorm(ctx context.Context, e *env) (*job, error) {
	bins := filepath.Join(e.tmp, "bins")
	self, err := os.ReadFile(e.self)
	if err != nil {
		return nil, err
	}
	const n = 30
	for i := range n {
		if err := coldWrite(filepath.Join(bins, fmt.Sprintf("bin-%d", i)), self, 0o700); err != nil {
			return nil, err
		}
		if _, err := e.coldFileAt(filepath.Join(bins, fmt.Sprintf("lib-%d", i)), stormLib); err != nil {
			return nil, err
		}
	}
	g, err := e.group("storm", 1<<30)
	if err != nil {
		return nil, err
	}
	return e.spawn(g, 1, func(int) []string { return []string{"storm", "bins=" + bins, "n=" + strconv.Itoa(n), "for=10s"} })
}

func readbackPair(ctx context.Context, e *env) (*job, error) {
	at := time.Now().Add(20 * time.Second)
	var gs []*groups
	var jobs []*job
	defer func() {
		for _, j := range jobs {
			j.stop()
		}
	}()
	for _, name := range []string{"readback-a", "readback-b"} {
		g, err := e.group(name, 256*mib)
		if err != nil {
			return nil, err
		}
		j, err := e.spawn(g, 1, func(int) []string {
			return []string{"readback", "size=" + strconv.Itoa(128*mib), "at=" + strconv.FormatInt(at.UnixNano(), 10), "for=35s"}
		})
		if err != nil {
			return nil, err
		}
		gs, jobs = append(gs, g), append(jobs, j)
	}
	both := jobs
	jobs = nil
	return &job{
		begin: func() (time.Time, error) {
			for _, j := range both {
				if _, err := j.begin(); err != nil {
					return time.Time{}, err
				}
			}
			// Filled in about a second; pushed out to swap, then idle
			// until at.
			time.Sleep(4 * time.Second)
			for _, g := range gs {
				if err := g.reclaim(160 * mib); err != nil {
					return time.Time{}, err
				}
			}
			return at, nil
		},
		wait: func(ctx context.Context) error {
			for _, j := range both {
				if err := j.wait(ctx); err != nil {
					return err
				}
			}
			return nil
		},
		stop: func() {
			for _, j := range both {
				j.stop()
			}
		},
	}, nil
}

func zramLight(ctx context.Context, e *env) (*job, error) {
	g, err := e.group("zram-light", 128*mib)
	if err != nil {
		return nil, err
	}
	return e.spawn(g, 1, func(int) []string {
		return []string{"touch", "size=" + strconv.Itoa(160*mib), "hot=" + strconv.Itoa(96*mib), "cold_per_s=20", "for=40s"}
	})
}

func proactiveReclaim(ctx context.Context, e *env) (*job, error) {
	g, err := e.group("reclaim", 512*mib)
	if err != nil {
		return nil, err
	}
	j, err := e.spawn(g, 1, func(int) []string {
		return []string{"touch", "size=" + strconv.Itoa(192*mib), "hot=" + strconv.Itoa(64*mib), "for=45s"}
	})
	if err != nil {
		return nil, err
	}
	wait := j.wait
	j.wait = func(ctx context.Context) error {
		done := make(chan error, 1)
		go func() { done <- wait(ctx) }()
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case err := <-done:
				return err
			case <-tick.C:
				if err := g.reclaim(64 * mib); err != nil {
					return err
				}
			}
		}
	}
	return j, nil
}

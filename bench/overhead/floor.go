package main

import (
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// floorFigures are what bpf_stats charges a program here before its body
// does anything: an empty program on page_fault_user, run by the bench's
// own minor faults. Its run time is the statistics' own two clock reads
// and what lies between them around the body, which every run of every
// observer program pays too; a major fault runs four or five of them.
type floorFigures struct {
	Runs      uint64  `json:"runs"`
	RunTimeNs uint64  `json:"run_time_ns"`
	NsPerRun  float64 `json:"ns_per_run"`
	// ClockNs is what one bpf_ktime_get_ns adds to a run: a second
	// program, that reads the clock and nothing else, on the same
	// faults, less the empty one.
	ClockNs float64 `json:"clock_ns"`
}

// measureFloor runs an empty program, and one that reads the clock, on
// page_fault_user for d of minor faults, with the kernel's statistics on.
func measureFloor(d time.Duration) (floorFigures, error) {
	stats, err := enableBPFStats()
	if err != nil {
		return floorFigures{}, err
	}
	defer stats.Close()
	var progs [2]*ebpf.Program
	for i, insns := range []asm.Instructions{
		{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		{asm.FnKtimeGetNs.Call(), asm.Mov.Imm(asm.R0, 0), asm.Return()},
	} {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "bench_floor", Type: ebpf.RawTracepoint, License: "GPL", Instructions: insns})
		if err != nil {
			return floorFigures{}, fmt.Errorf("loading the floor's program: %w", err)
		}
		defer p.Close()
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "page_fault_user", Program: p})
		if err != nil {
			return floorFigures{}, fmt.Errorf("attaching the floor's program to page_fault_user (x86): %w", err)
		}
		defer l.Close()
		progs[i] = p
	}
	page := os.Getpagesize()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		mem, err := unix.Mmap(-1, 0, 16<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return floorFigures{}, err
		}
		for i := 0; i < len(mem); i += page {
			mem[i] = 1
		}
		if err := unix.Munmap(mem); err != nil {
			return floorFigures{}, err
		}
	}
	var st [2]*ebpf.ProgramStats
	for i, p := range progs {
		var err error
		if st[i], err = p.Stats(); err != nil {
			return floorFigures{}, err
		}
		if st[i].RunCount == 0 {
			return floorFigures{}, fmt.Errorf("the floor's program on page_fault_user never ran over %s of faults", d)
		}
	}
	perRun := func(s *ebpf.ProgramStats) float64 { return float64(s.Runtime.Nanoseconds()) / float64(s.RunCount) }
	return floorFigures{Runs: st[0].RunCount, RunTimeNs: uint64(st[0].Runtime), NsPerRun: perRun(st[0]),
		ClockNs: perRun(st[1]) - perRun(st[0])}, nil
}

// floorPerOp is the floor's share of a workload's BPF time per op: the
// floor times the runs of every program an op makes.
func floorPerOp(f *floorFigures, a *bpfAttribution) float64 {
	if f == nil || a == nil {
		return 0
	}
	var runs float64
	for _, p := range a.Programs {
		runs += p.RunsPerOp
	}
	return runs * f.NsPerRun
}

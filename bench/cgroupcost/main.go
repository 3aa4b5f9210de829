// Command cgroupcost measures what counting faults per cgroup adds to the
// BPF program that runs on every major fault: the probes loaded with the
// per-cgroup counters on and off, in alternating rounds, each round a file
// major-fault loop in this process, and the kernel's own run-time
// statistics of major_fault (bpf_stats) divided by its runs. It prints the
// two side by side and fails when the per-cgroup part passes --max.
// Invoked by `make bench`; needs root.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/probe"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
)

func main() {
	rounds := flag.Int("rounds", 6, "rounds of each, alternating")
	window := flag.Duration("duration", 3*time.Second, "fault loop of each round")
	maxNs := flag.Float64("max", 50, "most ns per major fault the per-cgroup counting may add (median of the rounds)")
	flag.Parse()
	if err := run(*rounds, *window, *maxNs); err != nil {
		fmt.Fprintln(os.Stderr, "cgroupcost:", err)
		os.Exit(1)
	}
}

func run(rounds int, window time.Duration, maxNs float64) error {
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return fmt.Errorf("enabling BPF statistics (root, Linux 5.8+): %w", err)
	}
	defer stats.Close()
	file, err := faultFile()
	if err != nil {
		return err
	}
	defer os.Remove(file)
	per := map[bool][]float64{}
	for i := range 2 * rounds {
		on := i%2 == 0
		if i/2%2 == 1 {
			on = !on // ABBA: neither goes first every time
		}
		ns, faults, err := round(on, file, window)
		if err != nil {
			return err
		}
		per[on] = append(per[on], ns)
		fmt.Printf("round %2d: per-cgroup %-3s  %8d major faults  %6.0f ns each in major_fault\n", i+1, onOff(on), faults, ns)
	}
	on, off := median(per[true]), median(per[false])
	fmt.Printf("\nmajor_fault, ns per major fault (median of %d rounds each)\n", rounds)
	fmt.Printf("  per-cgroup counting off (--cgroup.top-k=0): %6.0f\n", off)
	fmt.Printf("  per-cgroup counting on  (default):          %6.0f\n", on)
	fmt.Printf("  added by it: %+.0f ns (%.2fx), target at most %.0f ns\n", on-off, on/off, maxNs)
	if on-off > maxNs {
		return fmt.Errorf("the per-cgroup counting adds %.0f ns a major fault, past %.0f", on-off, maxNs)
	}
	return nil
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// round loads the probes, takes file major faults for window, and returns
// major_fault's run time per run over it, and the runs.
func round(cgroups bool, file string, window time.Duration) (float64, uint64, error) {
	p, err := probe.Load(probe.Options{Cgroups: cgroups, Calm: -1}) // every fault timed: the whole per-fault path
	if err != nil {
		return 0, 0, err
	}
	defer p.Close()
	before, err := p.Read()
	if err != nil {
		return 0, 0, err
	}
	if err := faultLoop(file, window); err != nil {
		return 0, 0, err
	}
	after, err := p.Read()
	if err != nil {
		return 0, 0, err
	}
	b, a := majorFault(before.Programs), majorFault(after.Programs)
	runs := a.Runs - b.Runs
	if runs == 0 {
		return 0, 0, fmt.Errorf("major_fault ran no time in %s of faults: the loop took none, or BPF statistics are off", window)
	}
	return float64(a.RunTime-b.RunTime) / float64(runs), runs, nil
}

func majorFault(ps []readout.ProgramStats) readout.ProgramStats {
	for _, p := range ps {
		if p.Name == "major_fault" {
			return p
		}
	}
	return readout.ProgramStats{}
}

// faultFile is a 16 MiB file on a disk (not tmpfs: its cache can be
// dropped), under /var/tmp.
func faultFile() (string, error) {
	f, err := os.CreateTemp("/var/tmp", "thrashscope-cgroupcost-")
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, 16<<20)
	for i := range buf {
		buf[i] = byte(i*7 + i>>12)
	}
	if _, err := f.Write(buf); err != nil {
		return "", err
	}
	return filepath.Clean(f.Name()), f.Sync()
}

// faultLoop reads one byte of every page of the file through a mapping
// with the cache dropped first, again and again: each read a major fault.
func faultLoop(path string, window time.Duration) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	page := os.Getpagesize()
	var sum byte
	for end := time.Now().Add(window); time.Now().Before(end); {
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			return err
		}
		mem, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return err
		}
		_ = unix.Madvise(mem, unix.MADV_RANDOM)
		for off := 0; off < len(mem); off += page {
			sum += mem[off]
		}
		_ = unix.Munmap(mem)
	}
	sink = sum
	return nil
}

var sink byte

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

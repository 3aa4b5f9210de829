// Command cgroupcost measures what counting faults per cgroup adds to the
// BPF program that runs on every major fault: the probes loaded with the
// per-cgroup counters on and off, in alternating rounds, each round file
// major-fault loops, and the kernel's own run-time statistics of
// major_fault (bpf_stats) divided by its runs. Two shapes: one cgroup
// faulting (this process), and more cgroups faulting at once than a CPU
// has slots for their counts, so that the slots pass from cgroup to cgroup
// (children, each in a cgroup2 group of its own). It prints both side by
// side and fails when the per-cgroup part passes --max with one cgroup;
// the shared shape, a third of whose cgroups count in the map directly,
// is shown beside it, its own figure.
// Invoked by `make bench`; needs root.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/probe"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
)

// childEnv names the file a child faults on; the child starts its loop on
// a line on stdin and runs it for childWindowEnv.
const (
	childEnv       = "THRASHSCOPE_CGROUPCOST_FILE"
	childWindowEnv = "THRASHSCOPE_CGROUPCOST_WINDOW"
)

// shape is what faults in a round: this process, or children in groups
// of their own.
type shape struct {
	name   string
	groups int // 0: this process, in its own cgroup
}

func main() {
	if file := os.Getenv(childEnv); file != "" {
		if err := child(file); err != nil {
			fmt.Fprintln(os.Stderr, "cgroupcost child:", err)
			os.Exit(1)
		}
		return
	}
	rounds := flag.Int("rounds", 8, "rounds of each, alternating")
	window := flag.Duration("duration", 3*time.Second, "fault loop of each round")
	groups := flag.Int("groups", 24, "cgroups faulting at once in the shared shape (more than the 16 slots a CPU has)")
	way := flag.String("probes.way", "auto", "the programs' way: auto, fast or portable")
	maxNs := flag.Float64("max", 50, "most ns per major fault the per-cgroup counting may add with one cgroup (median of the rounds), on the fast way; the portable way may add twice as much")
	flag.Parse()
	w, err := probe.ParseWay(*way)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cgroupcost:", err)
		os.Exit(2)
	}
	if err := run(w, *rounds, *window, *groups, *maxNs); err != nil {
		fmt.Fprintln(os.Stderr, "cgroupcost:", err)
		os.Exit(1)
	}
}

func run(way probe.Way, rounds int, window time.Duration, groups int, maxNs float64) error {
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return fmt.Errorf("enabling BPF statistics (root, Linux 5.8+): %w", err)
	}
	defer stats.Close()
	files := make([]string, max(1, groups))
	for i := range files {
		if files[i], err = faultFile(); err != nil {
			return err
		}
		defer os.Remove(files[i])
	}
	var failed error
	for _, sh := range []shape{{name: "one cgroup"}, {name: fmt.Sprintf("%d cgroups at once", groups), groups: groups}} {
		fmt.Printf("%s:\n", sh.name)
		per := map[bool][]float64{}
		for i := range 2 * rounds {
			on := i%2 == 0
			if i/2%2 == 1 {
				on = !on // ABBA: neither goes first every time
			}
			ns, faults, err := round(way, on, sh, files, window)
			if err != nil {
				return err
			}
			per[on] = append(per[on], ns)
			fmt.Printf("  round %2d: per-cgroup %-3s  %8d major faults  %6.0f ns each in major_fault\n", i+1, onOff(on), faults, ns)
		}
		on, off := median(per[true]), median(per[false])
		fmt.Printf("major_fault, ns per major fault, %s (median of %d rounds each)\n", sh.name, rounds)
		fmt.Printf("  per-cgroup counting off (--cgroup.top-k=0): %6.0f\n", off)
		fmt.Printf("  per-cgroup counting on  (default):          %6.0f\n", on)
		if sh.groups > 0 {
			fmt.Printf("  added by it: %+.0f ns (%.2fx), more cgroups than slots: shown, not judged\n\n", on-off, on/off)
			continue
		}
		limit := maxNs
		if loadedWay == probe.WayPortable {
			// Its cgroup id is a helper call (bpf_get_current_cgroup_id),
			// not the fast way's plain loads: about 30 ns more.
			limit = 2 * maxNs
		}
		fmt.Printf("  added by it: %+.0f ns (%.2fx), target at most %.0f ns on the %s way\n\n", on-off, on/off, limit, loadedWay)
		if on-off > limit {
			failed = fmt.Errorf("the per-cgroup counting adds %+.0f ns a major fault with one cgroup, past %.0f", on-off, limit)
		}
	}
	return failed
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// round loads the probes, takes file major faults for window in the
// shape, and returns major_fault's run time per run over it, and the runs.
// loadedWay is the programs' way, printed at the first round.
var loadedWay probe.Way

func round(way probe.Way, cgroups bool, sh shape, files []string, window time.Duration) (float64, uint64, error) {
	p, err := probe.Load(probe.Options{Cgroups: cgroups, Calm: -1, Way: way}) // every fault timed: the whole per-fault path
	if err != nil {
		return 0, 0, err
	}
	defer p.Close()
	if w, why := p.Way(); loadedWay == "" {
		fmt.Printf("BPF programs: the %s way (%s)\n", w, why)
		loadedWay = w
	}
	var kids *children
	if sh.groups > 0 {
		if kids, err = startChildren(files[:sh.groups], window); err != nil {
			return 0, 0, err
		}
		defer kids.close()
	}
	before, err := p.Read()
	if err != nil {
		return 0, 0, err
	}
	if kids != nil {
		err = kids.run()
	} else {
		err = faultLoop(files[0], window)
	}
	if err != nil {
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

// children are fault loops, each in a cgroup2 group of its own, waiting
// for the word.
type children struct {
	cmds   []*exec.Cmd
	starts []io.WriteCloser
	groups []*cgroup.Cgroup
}

func startChildren(files []string, window time.Duration) (*children, error) {
	parent, err := cgroup.OwnUnified("/proc")
	if err != nil {
		return nil, err
	}
	k := &children{}
	for i, file := range files {
		g, err := parent.CreatePressureGroup(fmt.Sprintf("cgroupcost-%d-%d", os.Getpid(), i))
		if err != nil {
			k.close()
			return nil, err
		}
		k.groups = append(k.groups, g)
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"="+file, childWindowEnv+"="+window.String())
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		start, err := cmd.StdinPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			k.close()
			return nil, err
		}
		k.cmds, k.starts = append(k.cmds, cmd), append(k.starts, start)
		if err := g.Add(cmd.Process.Pid); err != nil {
			k.close()
			return nil, err
		}
	}
	return k, nil
}

// run starts every loop and waits for them all.
func (k *children) run() error {
	for _, s := range k.starts {
		if _, err := io.WriteString(s, "go\n"); err != nil {
			return err
		}
	}
	var first error
	for _, cmd := range k.cmds {
		if err := cmd.Wait(); err != nil && first == nil {
			first = fmt.Errorf("a fault loop: %w", err)
		}
	}
	k.cmds = nil
	return first
}

// close kills what still runs and removes the groups.
func (k *children) close() {
	for _, cmd := range k.cmds {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, g := range k.groups {
		if err := g.Destroy(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "cgroupcost: removing a group:", err)
		}
	}
}

// child is one fault loop: it waits for a line on stdin, then faults.
func child(file string) error {
	window, err := time.ParseDuration(os.Getenv(childWindowEnv))
	if err != nil {
		return err
	}
	if _, err := io.ReadFull(os.Stdin, make([]byte, 3)); err != nil {
		return err
	}
	return faultLoop(file, window)
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

package main

import (
	"fmt"
	"time"

	"github.com/prometheus/procfs"
)

// hostSample is the host's CPU time at one moment.
type hostSample struct {
	at                 time.Time
	busy, steal, total float64 // the host's CPU seconds, all CPUs
}

func sampleHost() (hostSample, error) {
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		return hostSample{}, err
	}
	st, err := fs.Stat()
	if err != nil {
		return hostSample{}, err
	}
	c := st.CPUTotal
	busy := c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ
	return hostSample{at: time.Now(), busy: busy, steal: c.Steal, total: busy + c.Idle + c.Iowait + c.Steal}, nil
}

// hostMeanwhile says what the host's CPUs did while a guest ran, in CPUs
// on average: its own qemu (qemuCPU, from its exit status), everything
// else (a guest beside it included), and what the hypervisor took
// (steal). A TCG guest's speed is the host's: a guest twice as slow as
// usual is explained here, or by nothing this run did.
func hostMeanwhile(a, b hostSample, qemuCPU time.Duration) string {
	wall := b.at.Sub(a.at).Seconds()
	if wall <= 0 || b.total <= a.total {
		return ""
	}
	cpus := (b.total - a.total) / wall
	guest := qemuCPU.Seconds() / wall
	others := max(0, (b.busy-a.busy)/wall-guest)
	return fmt.Sprintf("qemu %.2f of %.0f CPUs, others %.2f, stolen %.2f", guest, cpus, others, (b.steal-a.steal)/wall)
}

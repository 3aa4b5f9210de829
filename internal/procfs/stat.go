package procfs

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
)

// CPUSeconds is the time all CPUs together spent in each mode since boot,
// from the "cpu" line of /proc/stat.
type CPUSeconds struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal float64
}

// statHeadSize is how much of /proc/stat is read: its first line, the
// whole host's, is about 80 bytes; the per-CPU lines, the interrupts'
// counts (a line of thousands of numbers) and the rest are not needed.
const statHeadSize = 256

// CPU reads the system-wide CPU times: the first line of /proc/stat alone,
// parsed in place (parsing the whole file, as prometheus/procfs does, was
// a quarter of a sample's reading).
func (fs FS) CPU() (CPUSeconds, error) {
	var buf [statHeadSize]byte
	b, err := readSmall(fs.path+"/stat", buf[:])
	if err != nil {
		return CPUSeconds{}, fmt.Errorf("reading stat: %w", err)
	}
	c, err := parseCPULine(b)
	if err != nil {
		return CPUSeconds{}, fmt.Errorf("reading %s/stat: %w", fs.path, err)
	}
	return c, nil
}

// parseCPULine parses the "cpu" line that starts /proc/stat: user, nice,
// system, idle, iowait, irq, softirq, steal, in ticks. Kernels before
// 2.6.11 stop before steal, which is then 0; fewer than four is an error.
func parseCPULine(b []byte) (CPUSeconds, error) {
	line, _, complete := bytes.Cut(b, []byte{'\n'})
	fields := bytes.Fields(line)
	if len(fields) == 0 || string(fields[0]) != "cpu" {
		return CPUSeconds{}, fmt.Errorf("no \"cpu\" line first: %q", line)
	}
	if !complete && len(b) == statHeadSize {
		return CPUSeconds{}, fmt.Errorf("the \"cpu\" line passes %d bytes", statHeadSize)
	}
	fields = fields[1:]
	if len(fields) < 4 {
		return CPUSeconds{}, fmt.Errorf("\"cpu\" line with %d fields, want at least 4: %w", len(fields), io.ErrUnexpectedEOF)
	}
	var v [8]float64
	for i := range min(len(fields), len(v)) {
		n, err := strconv.ParseUint(string(fields[i]), 10, 64)
		if err != nil {
			return CPUSeconds{}, fmt.Errorf("\"cpu\" line field %d: %w", i+1, err)
		}
		v[i] = float64(n) / userHZ
	}
	return CPUSeconds{User: v[0], Nice: v[1], System: v[2], Idle: v[3], IOWait: v[4], IRQ: v[5], SoftIRQ: v[6], Steal: v[7]}, nil
}

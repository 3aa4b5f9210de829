package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// errNoField is a /proc file that parsed but lacked the field asked for.
var errNoField = errors.New("field not found")

// parseStatCPUTicks returns utime+stime from a /proc/<pid>/stat line: the
// CPU the whole thread group has used, in clock ticks.
func parseStatCPUTicks(r io.Reader) (uint64, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return 0, err
	}
	// comm (field 2) may hold spaces and ')', so split after the last ')'.
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return 0, fmt.Errorf("stat: no ')' closing the command name")
	}
	fields := strings.Fields(string(b[end+1:]))
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15.
	const utime, stime = 14 - 3, 15 - 3
	if len(fields) <= stime {
		return 0, fmt.Errorf("stat: %d fields after the command name, want more than %d", len(fields), stime)
	}
	u, err := strconv.ParseUint(fields[utime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat: utime: %w", err)
	}
	s, err := strconv.ParseUint(fields[stime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat: stime: %w", err)
	}
	return u + s, nil
}

// memStatus is the resident-set part of /proc/<pid>/status, in KiB.
type memStatus struct {
	RSSKiB uint64 // VmRSS: resident now
	HWMKiB uint64 // VmHWM: the peak resident set over the process's life
}

// parseStatusMem reads VmRSS and VmHWM from /proc/<pid>/status.
func parseStatusMem(r io.Reader) (memStatus, error) {
	var m memStatus
	var seen int
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *uint64
		switch key {
		case "VmRSS":
			dst = &m.RSSKiB
		case "VmHWM":
			dst = &m.HWMKiB
		default:
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(value), " ")
		if unit != "kB" {
			return memStatus{}, fmt.Errorf("status: %s in %q, want kB", key, unit)
		}
		v, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			return memStatus{}, fmt.Errorf("status: %s: %w", key, err)
		}
		*dst = v
		seen++
	}
	if err := sc.Err(); err != nil {
		return memStatus{}, err
	}
	// Kernel threads and zombies have no Vm* lines.
	if seen < 2 {
		return memStatus{}, fmt.Errorf("status: VmRSS or VmHWM: %w", errNoField)
	}
	return m, nil
}

// readProcessCPUTicks reads utime+stime of pid under procRoot (/proc, or a
// fixture tree in tests).
func readProcessCPUTicks(procRoot string, pid int) (uint64, error) {
	f, err := os.Open(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseStatCPUTicks(f)
}

// readProcessMem reads VmRSS and VmHWM of pid under procRoot.
func readProcessMem(procRoot string, pid int) (memStatus, error) {
	f, err := os.Open(filepath.Join(procRoot, strconv.Itoa(pid), "status"))
	if err != nil {
		return memStatus{}, err
	}
	defer f.Close()
	return parseStatusMem(f)
}

// userHZ is the tick rate /proc reports times in. It is 100 on every Linux
// ABI; the auxiliary vector says so authoritatively when it can be read.
const userHZ = 100

// clockTicksPerSecond is sysconf(_SC_CLK_TCK) without cgo: the AT_CLKTCK
// entry of /proc/self/auxv, or userHZ.
func clockTicksPerSecond() uint64 {
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return userHZ
	}
	if hz, ok := auxvClockTicks(b); ok {
		return hz
	}
	return userHZ
}

// auxvClockTicks finds AT_CLKTCK in a 64-bit native-endian auxiliary vector.
func auxvClockTicks(b []byte) (uint64, bool) {
	const atNull, atClkTck = 0, 17
	for ; len(b) >= 16; b = b[16:] {
		key := binary.NativeEndian.Uint64(b)
		val := binary.NativeEndian.Uint64(b[8:])
		switch key {
		case atNull:
			return 0, false
		case atClkTck:
			return val, val > 0
		}
	}
	return 0, false
}

// Package codepages gives back the pages of the daemon's own binary that it
// ran once and will not run again soon.
//
// The kernel maps a file's pages into a process a 64 KB window at a time
// (fault-around), so the package initialisers, flag parsing, the probes'
// BTF decoding and a run's set-up leave nearly the whole binary resident,
// though the sample loop runs a fraction of it. Release unmaps the
// binary's read-only segments (text, rodata, pclntab) with
// madvise(MADV_DONTNEED): the pages stay in the page cache, and what runs
// again comes back by a minor fault. Unmapped, they are also what the
// kernel reclaims first when the host is short of memory, rather than the
// mapped, executable pages it protects.
//
// The writable segment is never touched: it holds the program's data. A
// read-only mapping holding private copies of pages (a debugger's
// breakpoints, uprobes: smaps' Anonymous) is left as it is, since
// unmapping would drop them.
package codepages

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Released is what one Release did.
type Released struct {
	// Bytes were resident in the mappings it unmapped (smaps' Rss).
	Bytes uint64
	// Mappings is how many it unmapped; Kept how many of the binary's
	// read-only mappings it left because they hold private pages.
	Mappings, Kept int
}

// Release unmaps the running executable's read-only mappings that hold no
// private pages. Under a tracer it does nothing.
func Release() (Released, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return Released{}, fmt.Errorf("reading /proc/self/status: %w", err)
	}
	if traced, err := tracerAttached(b); err != nil || traced {
		return Released{}, err
	}
	b, err = os.ReadFile("/proc/self/smaps")
	if err != nil {
		return Released{}, fmt.Errorf("reading /proc/self/smaps: %w", err)
	}
	maps, err := parseSmaps(b)
	if err != nil {
		return Released{}, fmt.Errorf("/proc/self/smaps: %w", err)
	}
	dev, ino, ok := fileAt(maps, textAddress())
	if !ok {
		return Released{}, fmt.Errorf("/proc/self/smaps has no mapping of a file at %#x, in this binary's text", textAddress())
	}
	release, kept := choose(maps, dev, ino)
	r := Released{Kept: kept}
	for _, m := range release {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED); errno != 0 {
			return r, fmt.Errorf("madvise(MADV_DONTNEED) on %x-%x %s of the executable: %w", m.start, m.end, m.perms, errno)
		}
		r.Bytes += m.rss
		r.Mappings++
	}
	return r, nil
}

// textAddress is an address in this binary's text. The file mapped there is
// the binary as smaps names it: on overlayfs (most containers) a kernel may
// name the file underneath, whose device is not the one stat gives for
// /proc/self/exe.
func textAddress() uintptr { return reflect.ValueOf(Release).Pointer() }

// fileAt is the device and inode of the file mapped at addr.
func fileAt(maps []mapping, addr uintptr) (dev, ino uint64, ok bool) {
	for _, m := range maps {
		if m.start <= addr && addr < m.end && m.inode != 0 {
			return m.dev, m.inode, true
		}
	}
	return 0, 0, false
}

// choose picks the mappings of the file dev:ino to release: private and
// not writable, without private pages; kept counts those it leaves for
// their private pages.
func choose(maps []mapping, dev, ino uint64) (release []mapping, kept int) {
	for _, m := range maps {
		if m.inode != ino || m.dev != dev || !m.releasable() {
			continue
		}
		if m.anonymous > 0 {
			kept++
			continue
		}
		release = append(release, m)
	}
	return release, kept
}

// mapping is one entry of /proc/<pid>/smaps, as far as Release needs it.
type mapping struct {
	start, end     uintptr
	perms          string
	dev, inode     uint64
	rss, anonymous uint64 // bytes
}

// releasable: private and not writable (the text and read-only data).
func (m mapping) releasable() bool {
	return len(m.perms) == 4 && m.perms[1] != 'w' && m.perms[3] == 'p'
}

// parseSmaps reads the header and the Rss and Anonymous lines of each
// mapping.
func parseSmaps(b []byte) ([]mapping, error) {
	var maps []mapping
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		key, val, isField := strings.Cut(line, ":")
		// A header's first field is an address range, which has no colon
		// before its device ("00400000-00b40000 r-xp 00000000 fd:01 ...").
		if !isField || strings.Contains(key, " ") {
			m, err := parseHeader(line)
			if err != nil {
				return nil, err
			}
			maps = append(maps, m)
			continue
		}
		if len(maps) == 0 {
			return nil, fmt.Errorf("field %q before the first mapping", key)
		}
		m := &maps[len(maps)-1]
		switch key {
		case "Rss":
			m.rss = kB(val)
		case "Anonymous":
			m.anonymous = kB(val)
		}
	}
	return maps, sc.Err()
}

// parseHeader reads "start-end perms offset major:minor inode [path]".
func parseHeader(line string) (mapping, error) {
	f := strings.Fields(line)
	if len(f) < 5 {
		return mapping{}, fmt.Errorf("mapping line %q has %d fields, want 5 or more", line, len(f))
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	major, minor, ok2 := strings.Cut(f[3], ":")
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	maj, err3 := strconv.ParseUint(major, 16, 32)
	mnr, err4 := strconv.ParseUint(minor, 16, 32)
	inode, err5 := strconv.ParseUint(f[4], 10, 64)
	if err := errors.Join(err1, err2, err3, err4, err5); !ok || !ok2 || err != nil {
		return mapping{}, fmt.Errorf("mapping line %q does not parse: %v", line, err)
	}
	return mapping{
		start: uintptr(start), end: uintptr(end), perms: f[1],
		dev: unix.Mkdev(uint32(maj), uint32(mnr)), inode: inode,
	}, nil
}

// kB reads "   1234 kB" as bytes; anything else is 0.
func kB(v string) uint64 {
	n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	return n << 10
}

// tracerAttached reads TracerPid from /proc/self/status.
func tracerAttached(status []byte) (bool, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "TracerPid:"); ok {
			return strings.TrimSpace(v) != "0", nil
		}
	}
	return false, errors.New("/proc/self/status has no TracerPid line")
}

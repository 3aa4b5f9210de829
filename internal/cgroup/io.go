package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/thrashscope/thrashscope/internal/kernfile"
)

// The kernel's I/O throttle (blk-throttle) on a cgroup: cgroup v2's io.max,
// or the v1 blkio controller's blkio.throttle.*_device files. A run's is
// set on its run cgroup where memory and io share the v2 hierarchy, else on
// a group of its own in the v1 blkio hierarchy (CreateIOGroup).

// IOLimit is one block device's throttle: I/Os and bytes a second each
// way, 0 for no limit.
type IOLimit struct {
	// Device is the whole disk's MAJ:MIN.
	Device                                 string
	ReadIOPS, WriteIOPS, ReadBPS, WriteBPS uint64
}

// IOStat is what a cgroup's I/O throttle saw on one device: the I/Os (bios)
// and bytes each way.
type IOStat struct {
	ReadIOs, WriteIOs, ReadBytes, WriteBytes uint64
}

// OwnBlkio finds this process's group in the v1 blkio hierarchy, where
// run I/O groups go when memory is on cgroup v1; it fails when blkio is not
// mounted on v1 (a pure v2 host has io in the unified hierarchy).
func OwnBlkio(procRoot string) (Parent, error) {
	paths, err := readV1Paths(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil {
		return Parent{}, fmt.Errorf("finding own blkio cgroup: %w", err)
	}
	mounts, err := readMountinfo(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return Parent{}, fmt.Errorf("finding own blkio cgroup: %w", err)
	}
	if p, ok := paths["blkio"]; ok {
		if dir, ok := locate(mounts, p, func(m mount) bool {
			return m.fstype == "cgroup" && slices.Contains(m.superOptions, "blkio")
		}); ok {
			return Parent{Path: dir}, nil
		}
	}
	return Parent{}, errors.New("finding own blkio cgroup: the blkio controller is not mounted on cgroup v1 (mount it, or run memory and io on cgroup v2)")
}

// readV1Paths maps each v1 controller to this process's path in its
// hierarchy.
func readV1Paths(file string) (map[string]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	paths := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		id, rest, ok1 := strings.Cut(sc.Text(), ":")
		controllers, cgPath, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 || id == "0" {
			continue
		}
		for c := range strings.SplitSeq(controllers, ",") {
			paths[c] = cgPath
		}
	}
	return paths, sc.Err()
}

// CreateIOGroup makes <parent>/<Prefix><name> in the v1 blkio hierarchy,
// with no limit until ThrottleIO: what is put in it has its own reads (and,
// where the kernel charges them to the task, writes) throttled.
func (p Parent) CreateIOGroup(name string) (*Cgroup, error) {
	if p.V2 {
		return nil, fmt.Errorf("creating an I/O group under %s: on cgroup v2 the run cgroup itself carries io.max", p.Path)
	}
	if _, err := os.Stat(filepath.Join(p.Path, "blkio.throttle.read_iops_device")); err != nil {
		return nil, fmt.Errorf("creating an I/O group under %s: no blkio.throttle.read_iops_device (%w): not the blkio hierarchy, or the kernel has no I/O throttle (CONFIG_BLK_DEV_THROTTLING)", p.Path, errno(err))
	}
	return p.create(name, nil)
}

// ThrottleIO sets the cgroup's I/O limits, device by device. On cgroup v2
// it needs the io controller enabled for the cgroup by its parent; the
// error says where to enable it.
func (c *Cgroup) ThrottleIO(limits []IOLimit) error {
	if err := c.owned(); err != nil {
		return err
	}
	for _, l := range limits {
		if err := c.throttle(l); err != nil {
			return fmt.Errorf("throttling device %s in %s: %w", l.Device, c.Path, err)
		}
	}
	return nil
}

func (c *Cgroup) throttle(l IOLimit) error {
	if !c.V2 {
		for _, f := range []struct {
			file string
			v    uint64
		}{{"blkio.throttle.read_iops_device", l.ReadIOPS}, {"blkio.throttle.write_iops_device", l.WriteIOPS},
			{"blkio.throttle.read_bps_device", l.ReadBPS}, {"blkio.throttle.write_bps_device", l.WriteBPS}} {
			if f.v == 0 {
				continue
			}
			if err := kernfile.WriteFile(filepath.Join(c.Path, f.file), fmt.Appendf(nil, "%s %d", l.Device, f.v)); err != nil {
				return fmt.Errorf("%s: %w", f.file, hint(errno(err)))
			}
		}
		return nil
	}
	file := filepath.Join(c.Path, "io.max")
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no io.max: the io controller is not enabled for it; enable io in %s/cgroup.subtree_control, or set --cgroup.parent to a delegated cgroup with io", filepath.Dir(c.Path))
	}
	line := l.Device
	for _, kv := range []struct {
		key string
		v   uint64
	}{{"riops", l.ReadIOPS}, {"wiops", l.WriteIOPS}, {"rbps", l.ReadBPS}, {"wbps", l.WriteBPS}} {
		if kv.v > 0 {
			line += fmt.Sprintf(" %s=%d", kv.key, kv.v)
		}
	}
	if err := kernfile.WriteFile(file, []byte(line)); err != nil {
		return fmt.Errorf("io.max %q: %w", line, hint(errno(err)))
	}
	return nil
}

// LiftIOThrottle removes the cgroup's I/O limits on the devices: what
// the throttle holds queued is let through at once, so tasks waiting on it
// (a killed process's last read, a reclaim's writes) finish.
func (c *Cgroup) LiftIOThrottle(devices []string) error {
	if err := c.owned(); err != nil {
		return err
	}
	var errs []error
	for _, d := range devices {
		if c.V2 {
			if err := kernfile.WriteFile(filepath.Join(c.Path, "io.max"), []byte(d+" rbps=max wbps=max riops=max wiops=max")); err != nil {
				errs = append(errs, fmt.Errorf("lifting the throttle on %s in %s: %w", d, c.Path, errno(err)))
			}
			continue
		}
		for _, f := range []string{"blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device", "blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device"} {
			if err := kernfile.WriteFile(filepath.Join(c.Path, f), []byte(d+" 0")); err != nil {
				errs = append(errs, fmt.Errorf("lifting %s on %s in %s: %w", f, d, c.Path, errno(err)))
			}
		}
	}
	return errors.Join(errs...)
}

// IOStats reads what the cgroup's I/O throttle saw, by device, over its
// subtree: io.stat on v2, blkio.throttle.io_serviced_recursive and
// io_service_bytes_recursive on v1.
func (c *Cgroup) IOStats() (map[string]IOStat, error) {
	return ReadIOStats(dirFiles{}, c.Path, c.V2)
}

// FileReader reads the file name in the group directory dir whole; a
// *kernfile.Set keeps each open between readings.
type FileReader interface {
	ReadFileAt(dir, name string) ([]byte, error)
}

type dirFiles struct{}

func (dirFiles) ReadFileAt(dir, name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(dir, name))
}

// ReadIOLimits reads the I/O limits set on the group at dir, any group's
// (the observer reads a workload's): io.max on v2, the four
// blkio.throttle.*_device files on v1. A device without a limit is left
// out; none is no limit.
func ReadIOLimits(r FileReader, dir string, v2 bool) ([]IOLimit, error) {
	byDevice := map[string]*IOLimit{}
	set := func(dev string, f func(*IOLimit) *uint64, n uint64) {
		l := byDevice[dev]
		if l == nil {
			l = &IOLimit{Device: dev}
			byDevice[dev] = l
		}
		*f(l) = n
	}
	fields := map[string]func(*IOLimit) *uint64{
		"riops": func(l *IOLimit) *uint64 { return &l.ReadIOPS }, "wiops": func(l *IOLimit) *uint64 { return &l.WriteIOPS },
		"rbps": func(l *IOLimit) *uint64 { return &l.ReadBPS }, "wbps": func(l *IOLimit) *uint64 { return &l.WriteBPS },
	}
	if v2 {
		b, err := r.ReadFileAt(dir, "io.max")
		if err != nil {
			return nil, err
		}
		// "253:0 rbps=max wbps=max riops=120 wiops=120"
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			for _, kv := range f[min(1, len(f)):] {
				k, v, _ := strings.Cut(kv, "=")
				if n, err := strconv.ParseUint(v, 10, 64); err == nil && fields[k] != nil {
					set(f[0], fields[k], n)
				}
			}
		}
	} else {
		for file, key := range map[string]string{"blkio.throttle.read_iops_device": "riops", "blkio.throttle.write_iops_device": "wiops",
			"blkio.throttle.read_bps_device": "rbps", "blkio.throttle.write_bps_device": "wbps"} {
			b, err := r.ReadFileAt(dir, file)
			if err != nil {
				return nil, err
			}
			// "253:0 120"
			for line := range strings.Lines(string(b)) {
				if f := strings.Fields(line); len(f) == 2 {
					if n, err := strconv.ParseUint(f[1], 10, 64); err == nil {
						set(f[0], fields[key], n)
					}
				}
			}
		}
	}
	var limits []IOLimit
	for _, l := range byDevice {
		limits = append(limits, *l)
	}
	slices.SortFunc(limits, func(a, b IOLimit) int { return strings.Compare(a.Device, b.Device) })
	return limits, nil
}

// ReadIOStats reads what the I/O throttle of the group at dir saw, by
// device, over its subtree, as IOStats does.
func ReadIOStats(r FileReader, dir string, v2 bool) (map[string]IOStat, error) {
	stats := map[string]IOStat{}
	if v2 {
		b, err := r.ReadFileAt(dir, "io.stat")
		if err != nil {
			return nil, err
		}
		return parseIOStat(string(b)), nil
	}
	for _, f := range []struct {
		file        string
		read, write func(*IOStat) *uint64
	}{
		{"blkio.throttle.io_serviced_recursive", func(s *IOStat) *uint64 { return &s.ReadIOs }, func(s *IOStat) *uint64 { return &s.WriteIOs }},
		{"blkio.throttle.io_service_bytes_recursive", func(s *IOStat) *uint64 { return &s.ReadBytes }, func(s *IOStat) *uint64 { return &s.WriteBytes }},
	} {
		b, err := r.ReadFileAt(dir, f.file)
		if err != nil {
			return nil, err
		}
		// "254:0 Read 200", "254:0 Write 0", ..., "Total 200"
		for line := range strings.Lines(string(b)) {
			fields := strings.Fields(line)
			if len(fields) != 3 {
				continue
			}
			n, err := strconv.ParseUint(fields[2], 10, 64)
			if err != nil {
				continue
			}
			s := stats[fields[0]]
			switch fields[1] {
			case "Read":
				*f.read(&s) = n
			case "Write":
				*f.write(&s) = n
			}
			stats[fields[0]] = s
		}
	}
	return stats, nil
}

// parseIOStat reads cgroup v2's io.stat: "MAJ:MIN rbytes=… wbytes=… rios=…
// wios=… …" a device.
func parseIOStat(text string) map[string]IOStat {
	stats := map[string]IOStat{}
	for line := range strings.Lines(text) {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		var s IOStat
		for _, kv := range fields[1:] {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseUint(v, 10, 64)
			switch k {
			case "rios":
				s.ReadIOs = n
			case "wios":
				s.WriteIOs = n
			case "rbytes":
				s.ReadBytes = n
			case "wbytes":
				s.WriteBytes = n
			}
		}
		stats[fields[0]] = s
	}
	return stats
}

package cgroup_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// A run's throttle is set where the kernel reads it: io.max on cgroup v2,
// the blkio.throttle files on v1, each limit on the device named, and
// IOStats reads the group's counts back.
func TestThrottleIO(t *testing.T) {
	p := ownParent(t)
	l := cgroup.IOLimit{Device: rootDisk(t), ReadIOPS: 120, WriteIOPS: 130, ReadBPS: 1 << 20}
	var g *cgroup.Cgroup
	if p.V2 {
		g = create(t, p, uniqueName("test"), cgroup.Limits{MemoryBytes: 64 << 20})
		if _, err := os.Stat(filepath.Join(g.Path, "io.max")); err != nil {
			testenv.Unavailable(t, fmt.Sprintf("the io controller is not enabled for %s's children (%v): enable io in its cgroup.subtree_control", p.Path, err))
		}
	} else {
		blkio, err := cgroup.OwnBlkio("/proc")
		if err != nil {
			t.Fatal(err)
		}
		if g, err = blkio.CreateIOGroup(uniqueName("test")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { destroy(t, g) })
	}
	if err := g.ThrottleIO([]cgroup.IOLimit{l}); err != nil {
		t.Fatal(err)
	}
	if g.V2 {
		b, _ := os.ReadFile(filepath.Join(g.Path, "io.max"))
		if want := l.Device + " rbps=1048576 wbps=max riops=120 wiops=130"; strings.TrimSpace(string(b)) != want {
			t.Errorf("io.max %q, want %q", b, want)
		}
	} else {
		for file, want := range map[string]string{
			"blkio.throttle.read_iops_device":  l.Device + " 120",
			"blkio.throttle.write_iops_device": l.Device + " 130",
			"blkio.throttle.read_bps_device":   l.Device + " 1048576",
			"blkio.throttle.write_bps_device":  "",
		} {
			b, _ := os.ReadFile(filepath.Join(g.Path, file))
			if strings.TrimSpace(string(b)) != want {
				t.Errorf("%s %q, want %q", file, b, want)
			}
		}
	}
	if _, err := g.IOStats(); err != nil {
		t.Errorf("IOStats: %v", err)
	}
	// What the observer reads of any group's limits is what was set.
	if got, err := cgroup.ReadIOLimits(dirReader{}, g.Path, g.V2); err != nil || len(got) != 1 || got[0] != l {
		t.Errorf("ReadIOLimits: %+v, %v; want [%+v]", got, err, l)
	}
	// Lifted, nothing is left of it.
	if err := g.LiftIOThrottle([]string{l.Device}); err != nil {
		t.Fatal(err)
	}
	files := []string{"io.max"}
	if !g.V2 {
		files = []string{"blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device", "blkio.throttle.read_bps_device"}
	}
	for _, f := range files {
		if b, _ := os.ReadFile(filepath.Join(g.Path, f)); strings.TrimSpace(string(b)) != "" {
			t.Errorf("%s after LiftIOThrottle: %q", f, b)
		}
	}
	if got, err := cgroup.ReadIOLimits(dirReader{}, g.Path, g.V2); err != nil || len(got) != 0 {
		t.Errorf("ReadIOLimits after LiftIOThrottle: %+v, %v; want none", got, err)
	}
	// A device the kernel does not know is its error, named.
	if err := g.ThrottleIO([]cgroup.IOLimit{{Device: "4095:1048575", ReadIOPS: 1}}); err == nil || !strings.Contains(err.Error(), "throttling device 4095:1048575") {
		t.Errorf("an unknown device: %v", err)
	}
}

// A cgroup v2 group whose parent does not enable io for it has no io.max:
// the error says where to enable it.
func TestThrottleIONamesTheFix(t *testing.T) {
	testenv.RequirePrivileged(t)
	unified, err := cgroup.OwnUnified("/proc")
	if err != nil {
		t.Fatal(err)
	}
	g, err := unified.CreatePressureGroup(uniqueName("test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroy(t, g) })
	child, err := g.Child("child") // g enables no io for its children
	if err != nil {
		t.Fatal(err)
	}
	err = child.ThrottleIO([]cgroup.IOLimit{{Device: rootDisk(t), ReadIOPS: 1}})
	if err == nil || !strings.Contains(err.Error(), "enable io in "+g.Path+"/cgroup.subtree_control") {
		t.Errorf("ThrottleIO without io: %v, want the fix named", err)
	}
}

// rootDisk is the MAJ:MIN of a whole disk of this host: the one under /,
// or its partition's.
func rootDisk(t *testing.T) string {
	t.Helper()
	ents, err := os.ReadDir("/sys/block")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "loop") || strings.HasPrefix(e.Name(), "zram") || strings.HasPrefix(e.Name(), "ram") {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/sys/block", e.Name(), "dev"))
		if err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	t.Fatal("no disk in /sys/block")
	return ""
}

type dirReader struct{}

func (dirReader) ReadFileAt(dir, name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(dir, name))
}

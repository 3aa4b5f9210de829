package swapstate

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// fixture is a /proc and /sys with one swap file on disk vdz (254:16)
// and a zram device, zswap as given.
type fixture struct{ proc, sys string }

func newFixture(t *testing.T, swaps string) fixture {
	t.Helper()
	f := fixture{proc: t.TempDir(), sys: t.TempDir()}
	write(t, filepath.Join(f.proc, "swaps"), "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"+swaps)
	write(t, filepath.Join(f.proc, "meminfo"), "MemTotal:       1000000 kB\nZswap:            50000 kB\nZswapped:        150000 kB\n")
	disk := filepath.Join(f.sys, "devices", "virtual", "block", "vdz")
	must(t, os.MkdirAll(disk, 0o755))
	must(t, os.MkdirAll(filepath.Join(f.sys, "dev", "block"), 0o755))
	must(t, os.MkdirAll(filepath.Join(f.sys, "block"), 0o755))
	must(t, os.Symlink(disk, filepath.Join(f.sys, "dev", "block", "254:16")))
	must(t, os.Symlink(disk, filepath.Join(f.sys, "block", "vdz")))
	f.ticks(t, 0)
	must(t, os.MkdirAll(filepath.Join(f.sys, "block", "zram0"), 0o755))
	return f
}

// ticks sets vdz's io_ticks (the tenth field of its stat).
func (f fixture) ticks(t *testing.T, ms int) {
	write(t, filepath.Join(f.sys, "block", "vdz", "stat"), "100 0 800 10 200 0 1600 20 0 "+itoa(ms)+" 30 0 0 0 0 0 0\n")
}

func (f fixture) zswap(t *testing.T, enabled string, maxPct string) {
	dir := filepath.Join(f.sys, "module", "zswap", "parameters")
	must(t, os.MkdirAll(dir, 0o755))
	write(t, filepath.Join(dir, "enabled"), enabled+"\n")
	write(t, filepath.Join(dir, "max_pool_percent"), maxPct+"\n")
}

func (f fixture) reader() *Reader {
	r := NewReader(f.proc, f.sys)
	r.diskOf = func(_, name, _ string) (string, error) {
		if name == "/var/swap file" {
			return "254:16", nil
		}
		return "", errors.New("not a fixture's disk")
	}
	return r
}

const swapFile = "/var/swap\\040file                          file\t\t4194300\t\t1000\t\t-2\n"

// The disk's busy share is its io_ticks over the interval; the first read
// has none.
func TestDeviceBusy(t *testing.T) {
	f := newFixture(t, swapFile)
	r := f.reader()
	at := time.Unix(1000, 0)
	if st := r.Read(at); st.DeviceBusyPercent != -1 {
		t.Errorf("first read: busy %v, want -1 (no interval yet)", st.DeviceBusyPercent)
	}
	f.ticks(t, 1500)
	st := r.Read(at.Add(2 * time.Second))
	if st.DeviceBusyPercent != 75 || st.Device != "vdz" {
		t.Errorf("1500 ms of io_ticks in 2 s: busy %v on %q, want 75 on vdz", st.DeviceBusyPercent, st.Device)
	}
	f.ticks(t, 4000) // more than the interval: I/O accounted late
	if st := r.Read(at.Add(4 * time.Second)); st.DeviceBusyPercent != 100 {
		t.Errorf("2500 ms in 2 s: busy %v, want 100", st.DeviceBusyPercent)
	}
	r.Reset()
	if st := r.Read(at.Add(5 * time.Second)); st.DeviceBusyPercent != -1 {
		t.Errorf("after a reset: busy %v, want -1", st.DeviceBusyPercent)
	}
}

// The disk under a swap area is found once while the area stays, and
// again once it is gone and back, or after a reset.
func TestDiskFoundOnce(t *testing.T) {
	f := newFixture(t, swapFile)
	r := f.reader()
	found := 0
	diskOf := r.diskOf
	r.diskOf = func(sys, name, kind string) (string, error) { found++; return diskOf(sys, name, kind) }
	at := time.Unix(1000, 0)
	for i := range 3 {
		f.ticks(t, 500*i)
		r.Read(at.Add(time.Duration(i) * time.Second))
	}
	if st := r.Read(at.Add(3 * time.Second)); found != 1 || st.Device != "vdz" {
		t.Errorf("four reads: the disk looked up %d times, busy on %q; want once, vdz", found, st.Device)
	}
	write(t, filepath.Join(f.proc, "swaps"), "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n")
	r.Read(at.Add(4 * time.Second))
	write(t, filepath.Join(f.proc, "swaps"), "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"+swapFile)
	r.Read(at.Add(5 * time.Second))
	r.Reset()
	r.Read(at.Add(6 * time.Second))
	if found != 3 {
		t.Errorf("the area swapped off and on, then a reset: looked up %d times in all, want 3", found)
	}
}

// zram's fill is its swap area's use, or its memory against mem_limit.
func TestZramFill(t *testing.T) {
	f := newFixture(t, swapFile+"/dev/zram0                               partition\t1048572\t\t943715\t\t100\n")
	write(t, filepath.Join(f.sys, "block", "zram0", "mm_stat"), "966361088 300000000 310000000 0 310000000 0 0 0 0\n")
	st := f.reader().Read(time.Unix(1000, 0))
	if want := 943715.0 / 1048572 * 100; math.Abs(st.PoolFullPercent-want) > 1e-9 || st.Pool != "zram0" {
		t.Errorf("zram: %v %% on %q, want %v on zram0", st.PoolFullPercent, st.Pool, want)
	}
	// mem_limit 320 MB and 310 MB used: the limit binds first.
	write(t, filepath.Join(f.sys, "block", "zram0", "mm_stat"), "966361088 300000000 310000000 320000000 310000000 0 0 0 0\n")
	st = f.reader().Read(time.Unix(1000, 0))
	if want := 310e6 / 320e6 * 100; math.Abs(st.PoolFullPercent-want) > 1e-9 {
		t.Errorf("zram at its mem_limit: %v %%, want %v", st.PoolFullPercent, want)
	}
}

// zswap's fill is its pool against max_pool_percent of the memory, and
// only while it is on.
func TestZswapFill(t *testing.T) {
	f := newFixture(t, swapFile)
	if st := f.reader().Read(time.Unix(1000, 0)); st.PoolFullPercent != -1 {
		t.Errorf("no zswap: %v %%, want -1", st.PoolFullPercent)
	}
	f.zswap(t, "N", "20")
	if st := f.reader().Read(time.Unix(1000, 0)); st.PoolFullPercent != -1 {
		t.Errorf("zswap off: %v %%, want -1", st.PoolFullPercent)
	}
	f.zswap(t, "Y", "20")
	// 50,000 kB of a 200,000 kB bound (20 % of 1,000,000 kB).
	if st := f.reader().Read(time.Unix(1000, 0)); st.PoolFullPercent != 25 || st.Pool != "zswap" {
		t.Errorf("zswap: %v %% (%q), want 25 (zswap)", st.PoolFullPercent, st.Pool)
	}
}

// Nothing to read leaves everything unknown.
func TestNothingReadable(t *testing.T) {
	st := NewReader(t.TempDir(), t.TempDir()).Read(time.Unix(1000, 0))
	if st != Unknown {
		t.Errorf("an empty /proc: %+v, want %+v", st, Unknown)
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	must(t, os.WriteFile(path, []byte(s), 0o644))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

package observer

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/settings"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// hostSettings is what a run's settings may change on the host, read from
// the kernel's own files.
type hostSettings struct {
	PageCluster, Swappiness, Zswap, ZswapCompressor, MGLRU string
	// Swaps are /proc/swaps' areas with their priorities; Zram each zram
	// device's disk size.
	Swaps, Zram []string
}

func readHost(t *testing.T) hostSettings {
	t.Helper()
	// A file the kernel lacks (MGLRU's, zswap's) reads as absent; any other
	// error fails: a setting that cannot be read cannot be held.
	read := func(path string) string {
		v, err := settings.Host{}.Read(path)
		if errors.Is(err, fs.ErrNotExist) {
			return ""
		}
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		return v
	}
	h := hostSettings{
		PageCluster: read("/proc/sys/vm/page-cluster"), Swappiness: read("/proc/sys/vm/swappiness"),
		Zswap: read("/sys/module/zswap/parameters/enabled"), ZswapCompressor: read("/sys/module/zswap/parameters/compressor"),
		MGLRU: read("/sys/kernel/mm/lru_gen/enabled"),
	}
	b, err := os.ReadFile("/proc/swaps")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(l); len(f) >= 5 {
			h.Swaps = append(h.Swaps, f[0]+" "+f[4])
		}
	}
	devs, _ := filepath.Glob("/sys/block/zram*")
	for _, d := range devs {
		h.Zram = append(h.Zram, filepath.Base(d)+" "+read(filepath.Join(d, "disksize")))
	}
	return h
}

func (h hostSettings) String() string {
	b, _ := json.Marshal(h)
	return string(b)
}

// hostWide is a run's settings that change the host: zram swap (a free
// zram device is required), page cluster and swappiness, with values the
// host does not have.
func hostWide(t *testing.T, h hostSettings) (spec string, want func(t *testing.T, rec run.Record)) {
	t.Helper()
	testenv.RequireFreeZram(t)
	pc, sw := "0", "100"
	if h.PageCluster == "0" {
		pc = "1"
	}
	if h.Swappiness == "100" {
		sw = "90"
	}
	backend := "zram"
	spec = `{"swap":"` + backend + `","page_cluster":` + pc + `,"swappiness":` + sw + `}`
	return spec, func(t *testing.T, rec run.Record) {
		t.Helper()
		now := readHost(t)
		if now.PageCluster != pc {
			t.Errorf("vm.page-cluster reads %s during the run, want %s", now.PageCluster, pc)
		}
		sr := rec.Settings
		if sr == nil {
			t.Fatal("the running record has no settings")
		}
		i := slices.IndexFunc(sr.Files, func(s settings.Seen) bool { return s.Setting == "swappiness" })
		if i < 0 {
			t.Fatalf("the record names no swappiness file: %+v", sr.Files)
		}
		if got, _ := (settings.Host{}).Read(sr.Files[i].File); got != sw {
			t.Errorf("%s reads %s during the run, want %s", sr.Files[i].File, got, sw)
		}
		switch backend {
		case "zram":
			if sr.Zram == "" || !slices.Contains(now.Swaps, sr.Zram+" 32767") {
				t.Errorf("zram %q: the swap areas are %v, want it first (priority 32767)", sr.Zram, now.Swaps)
			}
		case "zswap":
			if now.Zswap != "Y" {
				t.Errorf("zswap enabled reads %s during the run, want Y", now.Zswap)
			}
		}
	}
}

// runningUnder waits for the run to be under its settings.
func runningUnder(t *testing.T, d *daemon, id string) run.Record {
	t.Helper()
	var rec run.Record
	waitFor(t, 60*time.Second, "the run to be under its settings", func() bool {
		rec = d.record(t, id)
		return rec.Settings != nil && len(rec.Settings.Files) > 0
	})
	return rec
}

// given back checks that the host has every setting as before, and no
// journal is left, in the host's state directory or the data directory.
func givenBack(t *testing.T, before hostSettings, data string) {
	t.Helper()
	if now := readHost(t); now.String() != before.String() {
		t.Errorf("the host's settings are not given back:\n got %s\nwant %s", now, before)
	}
	for _, dir := range []string{settings.DefaultStateDir, data} {
		if _, err := os.Stat(filepath.Join(dir, settings.JournalFile)); !os.IsNotExist(err) {
			t.Errorf("the journal is left in %s (%v)", dir, err)
		}
	}
}

// A run's host-wide settings are applied and seen in the kernel's files,
// and given back after the run completes, after DELETE, after SIGTERM, and
// after a kill -9 at the next start; nothing changes without the
// operator's opt-in, or for a setting the kernel lacks.
func TestHostSettingsAlwaysGivenBack(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	before := readHost(t)
	t.Logf("host: %s", before)
	t.Cleanup(func() {
		if now := readHost(t); now.String() != before.String() {
			t.Errorf("the host's settings after the test:\n got %s\nwant %s", now, before)
		}
	})
	set, check := hostWide(t, before)
	short := `{"preset":"e4","scale":0.05,"consumers":4,"interval":"1s","lead_in":"1s","settings":` + set + `}`
	long := `{"preset":"e4","scale":0.05,"lead_in":"1s","settings":` + set + `}`

	t.Run("completed", func(t *testing.T) {
		data := t.TempDir()
		d := startDaemon(t, data, "--settings.allow-host-without-token")
		rec := runningUnder(t, d, d.startRun(t, short).ID)
		check(t, rec)
		waitFor(t, 2*time.Minute, "the run to end", func() bool { rec = d.record(t, rec.ID); return !run.Active(rec.State) })
		if rec.State != run.StateCompleted || rec.Settings == nil || !rec.Settings.Restored {
			t.Fatalf("%s %q, settings %+v; want completed and restored", rec.State, rec.Reason, rec.Settings)
		}
		for _, s := range rec.Settings.Files {
			if s.During != s.Wrote && !strings.Contains(s.During, "["+s.Wrote+"]") {
				t.Errorf("%s: wrote %q, read %q back", s.File, s.Wrote, s.During)
			}
			if s.Host && s.After != s.Before {
				t.Errorf("%s: %q before, %q after", s.File, s.Before, s.After)
			}
		}
		givenBack(t, before, data)
	})
	t.Run("DELETE", func(t *testing.T) {
		data := t.TempDir()
		d := startDaemon(t, data, "--settings.allow-host-without-token")
		rec := runningUnder(t, d, d.startRun(t, long).ID)
		check(t, rec)
		if code, b := d.do(t, "DELETE", "/api/v1/runs/"+rec.ID, ""); code != http.StatusOK && code != http.StatusAccepted {
			t.Fatalf("DELETE: %d %s", code, b)
		}
		waitFor(t, time.Minute, "the run to end", func() bool { rec = d.record(t, rec.ID); return !run.Active(rec.State) })
		if rec.State != run.StateAborted || !rec.Settings.Restored {
			t.Errorf("%s %q, restored %v", rec.State, rec.Reason, rec.Settings.Restored)
		}
		givenBack(t, before, data)
	})
	t.Run("SIGTERM", func(t *testing.T) {
		data := t.TempDir()
		d := startDaemon(t, data, "--settings.allow-host-without-token")
		check(t, runningUnder(t, d, d.startRun(t, long).ID))
		d.stop()
		givenBack(t, before, data)
	})
	t.Run("kill -9", func(t *testing.T) {
		data := t.TempDir()
		d := startDaemon(t, data, "--settings.allow-host-without-token")
		rec := runningUnder(t, d, d.startRun(t, long).ID)
		check(t, rec)
		if err := d.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		d.cmd.Wait()
		if now := readHost(t); now.String() == before.String() {
			t.Fatal("the host's settings were given back with no one to give them back: the kill did not test the journal")
		}
		startDaemon(t, data) // no opt-in needed to give them back
		givenBack(t, before, data)
	})
	t.Run("an administrator's change kept", func(t *testing.T) {
		data := t.TempDir()
		d := startDaemon(t, data, "--settings.allow-host-without-token")
		rec := runningUnder(t, d, d.startRun(t, long).ID)
		check(t, rec)
		admin := "5"
		if before.PageCluster == admin {
			admin = "6"
		}
		if err := (settings.Host{}).Write("/proc/sys/vm/page-cluster", admin); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = settings.Host{}.Write("/proc/sys/vm/page-cluster", before.PageCluster) })
		if code, b := d.do(t, "DELETE", "/api/v1/runs/"+rec.ID, ""); code != http.StatusOK && code != http.StatusAccepted {
			t.Fatalf("DELETE: %d %s", code, b)
		}
		waitFor(t, time.Minute, "the run to end", func() bool { rec = d.record(t, rec.ID); return !run.Active(rec.State) })
		if now := readHost(t); now.PageCluster != admin {
			t.Errorf("page-cluster reads %s after the run, want the administrator's %s left alone", now.PageCluster, admin)
		}
		if rec.Settings == nil || len(rec.Settings.Kept) != 1 || !strings.Contains(rec.Settings.Kept[0], "page-cluster") {
			t.Errorf("the record's kept: %+v, want page-cluster", rec.Settings)
		}
		_ = settings.Host{}.Write("/proc/sys/vm/page-cluster", before.PageCluster)
		givenBack(t, before, data)
	})
	t.Run("another process meanwhile", func(t *testing.T) {
		data := t.TempDir()
		d := startDaemon(t, data, "--settings.allow-host-without-token")
		rec := runningUnder(t, d, d.startRun(t, long).ID)
		// A second observer on its own data directory recovers nothing of
		// the live run's; one on the same data directory is refused.
		startDaemon(t, t.TempDir())
		check(t, rec)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, filepath.Join(testenv.BinaryDir(t), "observer"), "--web.listen-address=127.0.0.1:0", "--data.dir="+data).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "held by another thrashscope process") {
			t.Errorf("a second observer on the data directory: %v\n%s\nwant a refusal naming the process that holds it", err, out)
		}
		if rec = d.record(t, rec.ID); !run.Active(rec.State) {
			t.Errorf("the live run is %s (%s) after a second observer", rec.State, rec.Reason)
		}
		check(t, rec)
		if code, b := d.do(t, "DELETE", "/api/v1/runs/"+rec.ID, ""); code != http.StatusOK && code != http.StatusAccepted {
			t.Fatalf("DELETE: %d %s", code, b)
		}
		waitFor(t, time.Minute, "the run to end", func() bool { rec = d.record(t, rec.ID); return !run.Active(rec.State) })
		givenBack(t, before, data)
	})
	t.Run("refused", func(t *testing.T) {
		data := t.TempDir()
		d := startDaemon(t, data)
		code, b := d.do(t, "POST", "/api/v1/runs", short)
		if code != http.StatusBadRequest || !strings.Contains(string(b), "--settings.allow-host") {
			t.Errorf("without the opt-in: %d %s, want 400 naming --settings.allow-host", code, b)
		}
		d2 := startDaemon(t, t.TempDir(), "--settings.allow-host-without-token")
		for _, c := range missing(t) {
			code, b := d2.do(t, "POST", "/api/v1/runs", `{"preset":"e4","scale":0.05,"settings":`+c.spec+`}`)
			if code != http.StatusBadRequest || !strings.Contains(string(b), c.names) {
				t.Errorf("%s, which this kernel lacks: %d %s, want 400 naming %s", c.spec, code, b, c.names)
			}
		}
		givenBack(t, before, data)
	})
	t.Run("mglru", func(t *testing.T) {
		if before.MGLRU == "" {
			testenv.NotApplicable(t, "this kernel has no MGLRU (CONFIG_LRU_GEN)", "its refusal, in refused")
		}
		flip := "off"
		if before.MGLRU == "0x0000" {
			flip = "on"
		}
		data := t.TempDir()
		d := startDaemon(t, data, "--settings.allow-host-without-token")
		rec := runningUnder(t, d, d.startRun(t, `{"preset":"e4","scale":0.05,"consumers":4,"interval":"1s","lead_in":"1s","settings":{"mglru":"`+flip+`","mglru_min_ttl_ms":1000}}`).ID)
		now := readHost(t)
		if (now.MGLRU == "0x0000") != (flip == "off") {
			t.Errorf("lru_gen/enabled reads %s during a run with mglru %s", now.MGLRU, flip)
		}
		if ttl, _ := (settings.Host{}).Read("/sys/kernel/mm/lru_gen/min_ttl_ms"); ttl != "1000" {
			t.Errorf("lru_gen/min_ttl_ms reads %s during the run, want 1000", ttl)
		}
		waitFor(t, 2*time.Minute, "the run to end", func() bool { rec = d.record(t, rec.ID); return !run.Active(rec.State) })
		if rec.State != run.StateCompleted || !rec.Settings.Restored {
			t.Errorf("%s %q, restored %v", rec.State, rec.Reason, rec.Settings.Restored)
		}
		givenBack(t, before, data)
	})
}

// missing are settings this host cannot take, each with what its refusal
// must name: MGLRU where the kernel has none, memory.high where memory is
// on cgroup v1, zram where no device is free.
func missing(t *testing.T) []struct{ spec, names string } {
	var out []struct{ spec, names string }
	if _, err := os.Stat("/sys/kernel/mm/lru_gen/enabled"); err != nil {
		out = append(out, struct{ spec, names string }{`{"mglru":"off"}`, "CONFIG_LRU_GEN"})
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		out = append(out, struct{ spec, names string }{`{"memory_high":33554432}`, "cgroup v2"})
	}
	t.Logf("refusals checked: %v", out)
	return out
}

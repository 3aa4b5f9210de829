package workload

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const pressureText = "some avg10=12.50 avg60=3.00 avg300=0.60 total=2500000\nfull avg10=8.00 avg60=2.00 avg300=0.40 total=1500000\n"

// A cgroup2 group with the memory controller: every reading from its own
// files, "max" read as no limit.
func TestReadKernelV2(t *testing.T) {
	parent := writeFiles(t, map[string]string{"memory.max": "100663296\n"})
	dir := filepath.Join(parent, "child")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"memory.pressure":     pressureText,
		"memory.events":       "low 0\nhigh 17\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n",
		"memory.stat":         "anon 1000\nfile 2000\npgmajfault 4242\nworkingset_refault_anon 300\nworkingset_refault_file 700\nworkingset_activate_anon 30\nworkingset_activate_file 70\n",
		"memory.current":      "104857600\n",
		"memory.swap.current": "52428800\n",
		"memory.max":          "134217728\n",
		"memory.high":         "max\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	k := ReadKernel(Files{V2: dir, V2Root: filepath.Dir(parent)})
	if len(k.Missing) != 0 {
		t.Errorf("missing %v, want every reading", k.Missing)
	}
	if !k.HasPressure || k.Pressure.Some != 2500*time.Millisecond || k.Pressure.Full != 1500*time.Millisecond {
		t.Errorf("pressure %+v", k.Pressure)
	}
	if k.Events["high"] != 17 || k.Events["max"] != 4 || k.Events["oom"] != 1 || k.Events["oom_kill"] != 1 {
		t.Errorf("events %v", k.Events)
	}
	if k.Refaults["anon"] != 300 || k.Refaults["file"] != 700 || k.Activations["anon"] != 30 || k.Activations["file"] != 70 || k.MajorFaults != 4242 {
		t.Errorf("stat: refaults %v activations %v pgmajfault %d", k.Refaults, k.Activations, k.MajorFaults)
	}
	if k.CurrentBytes != 100<<20 || k.SwapBytes != 50<<20 || k.MaxBytes != 128<<20 || k.HighBytes != -1 || k.LimitBytes != 96<<20 {
		t.Errorf("bytes: current %d swap %d max %d high %d limit %d; want the parent's 96 MiB as the limit", k.CurrentBytes, k.SwapBytes, k.MaxBytes, k.HighBytes, k.LimitBytes)
	}
}

// A hybrid host: the cgroup2 group has memory.pressure only; the rest
// comes from the v1 memory group (hierarchical totals), and what v1 does
// not have (high, activations) is left out.
func TestReadKernelHybrid(t *testing.T) {
	v2 := writeFiles(t, map[string]string{"memory.pressure": pressureText})
	v1 := writeFiles(t, map[string]string{
		"memory.failcnt":              "9\n",
		"memory.oom_control":          "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
		"memory.stat":                 "pgmajfault 5\nworkingset_refault_anon 1\nhierarchical_memory_limit 67108864\ntotal_pgmajfault 777\ntotal_workingset_refault_anon 111\ntotal_workingset_refault_file 222\n",
		"memory.usage_in_bytes":       "67108864\n",
		"memory.memsw.usage_in_bytes": "100663296\n",
		"memory.limit_in_bytes":       "9223372036854771712\n",
	})
	k := ReadKernel(Files{V2: v2, V1Memory: v1})
	if len(k.Missing) != 0 {
		t.Errorf("missing %v", k.Missing)
	}
	if k.Events["max"] != 9 || k.Events["oom_kill"] != 2 || k.MajorFaults != 777 || k.Refaults["anon"] != 111 || k.Refaults["file"] != 222 || k.Activations != nil {
		t.Errorf("v1: events %v pgmajfault %d refaults %v activations %v", k.Events, k.MajorFaults, k.Refaults, k.Activations)
	}
	if k.CurrentBytes != 64<<20 || k.SwapBytes != 32<<20 || k.MaxBytes != -1 || k.HighBytes != -1 || k.LimitBytes != 64<<20 {
		t.Errorf("v1 bytes: current %d swap %d max %d (unlimited: -1) high %d", k.CurrentBytes, k.SwapBytes, k.MaxBytes, k.HighBytes)
	}

	// No v1 group at the same path: PSI only, and why the rest is out.
	k = ReadKernel(Files{V2: v2})
	if !k.HasPressure || len(k.Missing) != 1 || !strings.Contains(k.Missing[0], "memory controller is not on this cgroup2 group") {
		t.Errorf("PSI alone: pressure %v, missing %v", k.HasPressure, k.Missing)
	}
	// A v1 group alone (no cgroup2 group): the v1 readings, and no PSI.
	k = ReadKernel(Files{V1Memory: v1})
	if k.HasPressure || k.Events["max"] != 9 || len(k.Missing) != 1 || !strings.Contains(k.Missing[0], "no cgroup2 group") {
		t.Errorf("v1 alone: pressure %v, events %v, missing %v", k.HasPressure, k.Events, k.Missing)
	}
	// A group removed meanwhile: nothing, and every reading says so.
	k = ReadKernel(Files{V2: filepath.Join(v2, "gone")})
	if k.HasPressure || len(k.Missing) != 2 || !strings.Contains(k.Missing[0], "no such file") {
		t.Errorf("removed: %+v", k)
	}
}

func TestParsePressure(t *testing.T) {
	for _, bad := range []string{"", "full avg10=0 total=5\n", "some total=x\n"} {
		if _, err := parsePressure(bad); err == nil {
			t.Errorf("parsePressure(%q) took it", bad)
		}
	}
	if p, err := parsePressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n"); err != nil || p.Some != 7*time.Microsecond || p.Full != 0 {
		t.Errorf("a kernel without full: %+v %v", p, err)
	}
}

// A workload's v1 memory group is the group at its own path, whatever
// group its members' /proc/<pid>/cgroup names: never a guess from a member,
// never an ancestor.
func TestV1MemoryGroup(t *testing.T) {
	v1 := t.TempDir()
	for _, rel := range []string{"user.slice/thrashscope-run-x/consumer-00", "system.slice/db.service"} {
		if err := os.MkdirAll(filepath.Join(v1, rel), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ path, want string }{
		{"/system.slice/db.service", filepath.Join(v1, "system.slice/db.service")},
		{"/user.slice/thrashscope-run-x/consumer-00", filepath.Join(v1, "user.slice/thrashscope-run-x/consumer-00")},
		// Its v1 group is elsewhere (a member's is under user.slice): none.
		{"/thrashscope-run-x/consumer-00", ""},
		{"/system.slice/db.service/child", ""}, // not the parent's
		{"/gone", ""},
	} {
		if got := V1MemoryGroup(v1, c.path); got != c.want {
			t.Errorf("V1MemoryGroup(%s) = %q, want %q", c.path, got, c.want)
		}
	}
}

// readKeys picks the keys asked for, says which the file had, skips lines
// that are not "key N", and calls a file without one line of it empty.
func TestReadKeys(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"stat":  "anon 4096\nfile 8192\n  pgmajfault  77 \nbad line here\nnegative -1\nhuge 99999999999999999999\nlast 5",
		"empty": "",
		"words": "no numbers\nat all\n",
	})
	keys := []string{"pgmajfault", "absent", "last", "huge"}
	vals := []uint64{1, 2, 3, 4}
	found, err := readKeys(osReader{}, dir, "stat", keys, vals)
	if err != nil || found != 1|1<<2 || vals[0] != 77 || vals[1] != 0 || vals[2] != 5 || vals[3] != 0 {
		t.Errorf("found %b %v (%v), want pgmajfault 77 and last 5 alone (the rest 0: huge passes 64 bits)", found, vals, err)
	}
	for _, name := range []string{"empty", "words"} {
		if _, err := readKeys(osReader{}, dir, name, keys, vals); err == nil {
			t.Errorf("%s: no error, want one: not a line of \"key N\"", name)
		}
	}
	if _, err := readKeys(osReader{}, dir, "gone", keys, vals); !os.IsNotExist(err) {
		t.Errorf("a missing file: %v, want not-exist", err)
	}
}

// memReader serves files from memory: the parse alone, in the benchmark.
type memReader map[string][]byte

func (m memReader) ReadFileAt(dir, name string) ([]byte, error) {
	if b, ok := m[dir+"/"+name]; ok {
		return b, nil
	}
	return nil, os.ErrNotExist
}

// BenchmarkReadKernelV1 is one workload's readings on a hybrid host, as
// every exported workload is read each second: the files' text from this
// machine's kernel (6.18, memory on v1), parsed.
func BenchmarkReadKernelV1(b *testing.B) {
	stat := "cache 0\nrss 0\nrss_huge 0\nshmem 0\nmapped_file 0\ndirty 0\nwriteback 0\nswap 0\nworkingset_refault_anon 0\nworkingset_refault_file 0\nworkingset_activate_anon 0\nworkingset_activate_file 0\nworkingset_restore_anon 0\nworkingset_restore_file 0\nworkingset_nodereclaim 0\npgpgin 0\npgpgout 0\npgfault 0\npgmajfault 0\ninactive_anon 0\nactive_anon 0\ninactive_file 0\nactive_file 0\nunevictable 0\nhierarchical_memory_limit 67108864\nhierarchical_memsw_limit 9223372036854771712\ntotal_cache 1204224\ntotal_rss 51265536\ntotal_rss_huge 0\ntotal_shmem 0\ntotal_mapped_file 1146880\ntotal_dirty 0\ntotal_writeback 0\ntotal_swap 48705536\ntotal_workingset_refault_anon 381187\ntotal_workingset_refault_file 1043\ntotal_workingset_activate_anon 120331\ntotal_workingset_activate_file 217\ntotal_workingset_restore_anon 9091\ntotal_workingset_restore_file 12\ntotal_workingset_nodereclaim 0\ntotal_pgpgin 2106119\ntotal_pgpgout 2093332\ntotal_pgfault 2377519\ntotal_pgmajfault 380114\ntotal_inactive_anon 25731072\ntotal_active_anon 25534464\ntotal_inactive_file 622592\ntotal_active_file 581632\ntotal_unevictable 0\n"
	r := memReader{
		"/v2/memory.pressure":             []byte(pressureText),
		"/v1/memory.failcnt":              []byte("129802\n"),
		"/v1/memory.oom_control":          []byte("oom_kill_disable 1\nunder_oom 0\noom_kill 0\n"),
		"/v1/memory.stat":                 []byte(stat),
		"/v1/memory.usage_in_bytes":       []byte("67063808\n"),
		"/v1/memory.memsw.usage_in_bytes": []byte("115769344\n"),
		"/v1/memory.limit_in_bytes":       []byte("67108864\n"),
	}
	f := Files{V2: "/v2", V1Memory: "/v1"}
	b.ReportAllocs()
	for b.Loop() {
		if k := ReadKernelFrom(r, f); k.MajorFaults != 380114 || len(k.Missing) != 0 {
			b.Fatalf("%+v", k)
		}
	}
}

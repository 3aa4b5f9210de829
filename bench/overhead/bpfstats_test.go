package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/thrashscope/thrashscope/internal/testenv"
)

func TestProgramName(t *testing.T) {
	tests := []struct {
		loaded string
		want   string
		ok     bool
	}{
		{"fault_entry_user", "fault_entry_user", true},
		{"fault_entry_use", "fault_entry_user", true}, // the kernel keeps 15 bytes
		{"fault_entry_kernel", "fault_entry_kernel", true},
		{"fault_entry_ker", "fault_entry_kernel", true},
		{"major_fault", "major_fault", true},
		{"memory_stall", "memory_stall", true},
		{"process_exit", "process_exit", true},
		{"fault_entry_us", "", false}, // shorter than the truncation
		{"fault_entry", "", false},
		{"fault_entry_userx", "", false},
		{"memory_stal", "", false},
		{"process_exit2", "", false},
		{"sd_devices", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.loaded, func(t *testing.T) {
			got, ok := programName(tt.loaded)
			if got != tt.want || ok != tt.ok {
				t.Errorf("programName(%q) = %q, %v; want %q, %v", tt.loaded, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// Every name the benchmark looks for survives the kernel's truncation
// distinctly, or two programs would be summed as one.
func TestProgramNamesDistinctWhenTruncated(t *testing.T) {
	seen := map[string]string{}
	for _, p := range thrashscopePrograms {
		tr := p[:min(len(p), bpfObjNameLen-1)]
		if other, ok := seen[tr]; ok {
			t.Errorf("%s and %s both truncate to %s", p, other, tr)
		}
		seen[tr] = p
	}
}

func TestParseFdinfoProgID(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    ebpf.ProgramID
		ok      bool
		wantErr bool
	}{
		{name: "program", in: "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t2061\nprog_type:\t17\nprog_jited:\t1\nprog_tag:\t3b185187f1855c4c\nmemlock:\t4096\nprog_id:\t42\nrun_time_ns:\t0\nrun_cnt:\t0\n", want: 42, ok: true},
		{name: "link", in: "pos:\t0\nflags:\t02000000\nlink_type:\traw_tracepoint\nlink_id:\t3\nprog_tag:\t3b185187f1855c4c\nprog_id:\t43\ntp_name:\tsched_switch\n", want: 43, ok: true},
		{name: "map", in: "pos:\t0\nflags:\t02000002\nmap_type:\t1\nkey_size:\t4\nmap_id:\t9\n", ok: false},
		{name: "regular file", in: "pos:\t0\nflags:\t0100002\nmnt_id:\t25\nino:\t7\n", ok: false},
		{name: "garbled id", in: "prog_id:\tforty\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, ok, err := parseFdinfoProgID(strings.NewReader(tt.in))
			if (err != nil) != tt.wantErr || id != tt.want || ok != tt.ok {
				t.Errorf("= %d, %v, %v; want %d, %v, error %v", id, ok, err, tt.want, tt.ok, tt.wantErr)
			}
		})
	}
}

func TestHeldProgramIDs(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "4242", "fdinfo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"0":  "pos:\t0\nflags:\t02\n",
		"7":  "prog_type:\t17\nprog_id:\t42\n",
		"8":  "link_type:\traw_tracepoint\nprog_id:\t43\n",
		"9":  "map_type:\t1\nmap_id:\t9\n",
		"10": "link_type:\tperf\nprog_id:\t42\n", // a link to a program also held directly
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := heldProgramIDs(root, 4242)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[ebpf.ProgramID]bool{42: true, 43: true}; !reflect.DeepEqual(got, want) {
		t.Errorf("held = %v, want %v", got, want)
	}
	if _, err := heldProgramIDs(root, 1); err == nil {
		t.Error("no error for a process that is gone")
	}
}

func TestCountersDelta(t *testing.T) {
	user := func(runs, ns uint64) programCounters {
		return programCounters{Name: "fault_entry_user", Runs: runs, RunTimeNs: ns}
	}
	stall := func(runs, ns, misses uint64) programCounters {
		return programCounters{Name: "memory_stall", Runs: runs, RunTimeNs: ns, RecursionMisses: misses}
	}
	tests := []struct {
		name          string
		before, after countersSnapshot
		want          []programCounters
		wantErr       string
	}{
		{
			name:   "deltas in report order",
			before: countersSnapshot{5: stall(100, 1000, 0), 3: user(10, 500)},
			after:  countersSnapshot{5: stall(300, 5000, 1), 3: user(1010, 90500)},
			want:   []programCounters{user(1000, 90000), stall(200, 4000, 1)},
		},
		{
			name:   "same name twice adds up",
			before: countersSnapshot{3: user(0, 0), 4: user(5, 5)},
			after:  countersSnapshot{3: user(10, 100), 4: user(25, 205)},
			want:   []programCounters{user(30, 300)},
		},
		{
			name:   "idle program is reported with zeros",
			before: countersSnapshot{5: stall(7, 70, 0)},
			after:  countersSnapshot{5: stall(7, 70, 0)},
			want:   []programCounters{stall(0, 0, 0)},
		},
		{
			name:   "a program only read after is ignored",
			before: countersSnapshot{3: user(0, 0)},
			after:  countersSnapshot{3: user(1, 10), 9: stall(1, 1, 0)},
			want:   []programCounters{user(1, 10)},
		},
		{
			name:    "vanished",
			before:  countersSnapshot{3: user(0, 0)},
			after:   countersSnapshot{},
			wantErr: "not when it closed",
		},
		{
			name:    "backwards",
			before:  countersSnapshot{3: user(10, 100)},
			after:   countersSnapshot{3: user(9, 200)},
			wantErr: "went backwards",
		},
		{
			name:    "never opened",
			after:   countersSnapshot{3: user(9, 200)},
			wantErr: "not read at both ends",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := countersDelta(tt.before, tt.after)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("delta = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// The kernel side, as root: a program this test loads under a thrashscope
// name is found (this process holds it, as the observer holds its own), and
// its test runs show up in the statistics.
func TestKernelBPFStats(t *testing.T) {
	testenv.RequirePrivileged(t)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "fault_entry_user", // loaded as fault_entry_use
		Type:    ebpf.SocketFilter,
		License: "MIT",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatalf("loading a test program: %v", err)
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()

	stats, err := openKernelBPFStats("/proc", os.Getpid(), quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	before, err := stats.snapshot()
	if err != nil {
		stats.Close()
		t.Fatal(err)
	}
	if c, ok := before[id]; !ok || c.Name != "fault_entry_user" {
		stats.Close()
		t.Fatalf("program %d not found as fault_entry_user: %+v", id, before)
	}
	const runs = 1000
	if _, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 14), Repeat: runs}); err != nil {
		stats.Close()
		t.Fatalf("running the test program: %v", err)
	}
	after, err := stats.snapshot()
	if err != nil {
		stats.Close()
		t.Fatal(err)
	}
	if err := stats.Close(); err != nil {
		t.Fatal(err)
	}
	delta, err := countersDelta(before, after)
	if err != nil {
		t.Fatal(err)
	}
	if len(delta) != 1 || delta[0].Runs < runs || delta[0].RunTimeNs == 0 {
		t.Errorf("delta over %d test runs = %+v", runs, delta)
	}
	t.Logf("%+v: %.0f ns/run", delta, float64(delta[0].RunTimeNs)/float64(delta[0].Runs))
}

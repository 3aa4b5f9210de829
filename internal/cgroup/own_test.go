package cgroup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOwn(t *testing.T) {
	tests := []struct {
		fixture string
		want    Parent
		wantErr string
	}{
		{fixture: "hybrid", want: Parent{Path: "/sys/fs/cgroup/memory/system.slice/thrashscope.service"}},
		{fixture: "pure-v2", want: Parent{Path: "/sys/fs/cgroup/system.slice/thrashscope.service", V2: true}},
		{fixture: "v1-comounted", want: Parent{Path: "/sys/fs/cgroup/cpu,memory/user.slice/session-3.scope"}},
		// A container sees its own cgroup bind-mounted at the mount point.
		{fixture: "v1-container", want: Parent{Path: "/sys/fs/cgroup/memory"}},
		{fixture: "hybrid-memory-on-v2", want: Parent{Path: "/sys/fs/cgroup/unified/user.slice/user-1000.slice/session-2.scope", V2: true}},
		{fixture: "memory-not-mounted", want: Parent{Path: "/sys/fs/cgroup/init.scope", V2: true}},
		{fixture: "escaped-mountpoint", want: Parent{Path: "/mnt/cgroup root/thrash lab", V2: true}},
		{fixture: "outside-namespace", wantErr: "no cgroup v1 memory mount nor cgroup v2 mount"},
		{fixture: "no-cgroup-mounts", wantErr: "no cgroup v1 memory mount nor cgroup v2 mount"},
		{fixture: "missing", wantErr: "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			got, err := Own(filepath.Join("testdata", tt.fixture))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Own() = %+v, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Own() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/sys/fs/cgroup`:       "/sys/fs/cgroup",
		`/mnt/a\040b`:          "/mnt/a b",
		`/mnt/tab\011x\134y`:   "/mnt/tab\tx\\y",
		`/mnt/short\04`:        `/mnt/short\04`,
		`/mnt/notoctal\09x`:    `/mnt/notoctal\09x`,
		`/mnt/trailing\`:       `/mnt/trailing\`,
		`/mnt/twice\040\040up`: "/mnt/twice  up",
	} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestKeyedValue(t *testing.T) {
	tests := []struct {
		name, text string
		want       uint64
		ok         bool
		err        bool
	}{
		{name: "v1 oom_control", text: "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", want: 3, ok: true},
		{name: "v2 events", text: "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 1\n", want: 2, ok: true},
		{name: "old kernel", text: "oom_kill_disable 0\nunder_oom 0\n"},
		{name: "garbage", text: "oom_kill x\n", err: true},
	}
	for _, tt := range tests {
		got, ok, err := keyedValue(tt.text, "oom_kill")
		if got != tt.want || ok != tt.ok || (err != nil) != tt.err {
			t.Errorf("%s: keyedValue = %d, %v, %v; want %d, %v, error %v", tt.name, got, ok, err, tt.want, tt.ok, tt.err)
		}
	}
}

// A hand-built handle on a foreign cgroup must never be written to.
func TestForeignCgroupIsNotTouched(t *testing.T) {
	c := &Cgroup{Path: t.TempDir()}
	if err := c.Add(1); err == nil || !strings.Contains(err.Error(), "not made by thrashscope") {
		t.Errorf("Add on a foreign cgroup: %v, want a refusal", err)
	}
	if err := c.Destroy(t.Context()); err == nil || !strings.Contains(err.Error(), "not made by thrashscope") {
		t.Errorf("Destroy on a foreign cgroup: %v, want a refusal", err)
	}
	if _, err := Open(c.Path, false); err == nil {
		t.Error("Open of a directory without the prefix succeeded")
	}
}

func TestCreateRejectsBadInput(t *testing.T) {
	p := Parent{Path: t.TempDir()}
	for _, l := range []Limits{{MemoryBytes: 0}, {MemoryBytes: -1}} {
		if _, err := p.Create("x", l); err == nil || !strings.Contains(err.Error(), "must be positive") {
			t.Errorf("Create with %+v: %v, want a positive-limit error", l, err)
		}
	}
	for _, name := range []string{"", "a/b", "../x"} {
		if _, err := p.create(name, nil); err == nil || !strings.Contains(err.Error(), "invalid name") {
			t.Errorf("create(%q): %v, want an invalid-name error", name, err)
		}
	}
	// Not a cgroup filesystem: Check refuses before any mkdir.
	if _, err := p.Create("x", Limits{MemoryBytes: 1 << 20}); err == nil || !strings.Contains(err.Error(), "not in a cgroup filesystem") {
		t.Errorf("Create under a plain directory: %v", err)
	}
}

// TestHostMount: a container given the host's /sys/fs/cgroup finds the
// cgroup2 hierarchy in it whether the host is pure cgroup2 or hybrid, and
// the v1 memory hierarchy beside it on a hybrid host.
func TestHostMount(t *testing.T) {
	touch := func(p ...string) {
		t.Helper()
		f := filepath.Join(p...)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pure, hybrid, hybridNoMemory, v1, empty := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	touch(pure, "cgroup.controllers")
	touch(pure, "cgroup.procs")
	touch(hybrid, "unified", "cgroup.controllers")
	touch(hybrid, "memory", "memory.limit_in_bytes")
	touch(hybridNoMemory, "unified", "cgroup.controllers")
	touch(v1, "memory", "memory.limit_in_bytes")
	touch(v1, "cpu", "cgroup.procs")
	for _, c := range []struct {
		name, dir, point, v1Memory string
	}{
		{"pure cgroup2", pure, pure, ""},
		{"hybrid", hybrid, filepath.Join(hybrid, "unified"), filepath.Join(hybrid, "memory")},
		{"hybrid without a v1 memory hierarchy", hybridNoMemory, filepath.Join(hybridNoMemory, "unified"), ""},
	} {
		h, mem, err := HostMount(c.dir)
		if err != nil || h != (Hierarchy{Point: c.point, Root: "/"}) || mem != c.v1Memory {
			t.Errorf("%s: HostMount = %+v, %q, %v; want %s and %q", c.name, h, mem, err, c.point, c.v1Memory)
		}
	}
	for name, dir := range map[string]string{"pure v1": v1, "empty": empty, "missing": filepath.Join(empty, "nope")} {
		if h, _, err := HostMount(dir); err == nil || !strings.Contains(err.Error(), "mount the host's /sys/fs/cgroup") {
			t.Errorf("%s: HostMount = %+v, %v; want an error saying what to mount", name, h, err)
		}
	}
}

// TestHostMountAgreesWithMountinfo: this machine's own /sys/fs/cgroup
// read as a directory gives the cgroup2 hierarchy mountinfo names, and the
// v1 memory hierarchy when there is one.
func TestHostMountAgreesWithMountinfo(t *testing.T) {
	want, err := UnifiedHierarchy("/proc")
	if err != nil {
		t.Fatalf("this machine has no cgroup2 mount: %v", err)
	}
	h, mem, err := HostMount("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if h.Point != want.Point {
		t.Errorf("HostMount(/sys/fs/cgroup) = %+v, mountinfo's cgroup2 mount %+v", h, want)
	}
	wantMem, _ := V1MemoryMount("/proc")
	if mem != wantMem {
		t.Errorf("HostMount(/sys/fs/cgroup) v1 memory = %q, mountinfo's %q", mem, wantMem)
	}
}

package swapdev

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Spec
	}{
		{`"none"`, Spec{Profile: None}},
		{`"hdd-2013"`, Spec{Profile: HDD2013, Limits: Limits{ReadIOPS: 120, WriteIOPS: 120}}},
		{`"cloud-3000"`, Spec{Profile: Cloud, Limits: Limits{ReadIOPS: 3000, WriteIOPS: 3000, ReadBPS: 125 << 20, WriteBPS: 125 << 20}}},
		{`{"read_iops":200}`, Spec{Profile: Custom, Limits: Limits{ReadIOPS: 200}}},
		{`{"read_iops":200,"write_iops":100,"read_bps":1048576,"write_bps":2097152}`, Spec{Profile: Custom, Limits: Limits{200, 100, 1 << 20, 2 << 20}}},
		// A resolved spec posted back is the same device.
		{`{"profile":"hdd-2013","read_iops":120,"write_iops":120}`, Spec{Profile: HDD2013, Limits: Limits{ReadIOPS: 120, WriteIOPS: 120}}},
		{`{"profile":"hdd-2013"}`, Spec{Profile: HDD2013, Limits: Limits{ReadIOPS: 120, WriteIOPS: 120}}},
		// A profile's limit overridden is a custom device.
		{`{"profile":"hdd-2013","read_iops":200}`, Spec{Profile: Custom, Limits: Limits{ReadIOPS: 200, WriteIOPS: 120}}},
		{`{"profile":"custom","write_iops":7}`, Spec{Profile: Custom, Limits: Limits{WriteIOPS: 7}}},
		{`{"read_iops":4294967294}`, Spec{Profile: Custom, Limits: Limits{ReadIOPS: MaxIOPS}}},
		{`{"profile":"none"}`, Spec{Profile: None}},
	} {
		var s Spec
		if err := json.Unmarshal([]byte(tc.in), &s); err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if s != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.in, s, tc.want)
		}
		if err := s.Validate(); err != nil {
			t.Errorf("%s: Validate: %v", tc.in, err)
		}
		// What is stored reads back the same.
		b, _ := json.Marshal(s)
		var back Spec
		if err := json.Unmarshal(b, &back); err != nil || back != s {
			t.Errorf("%s: stored as %s, read back %+v (%v)", tc.in, b, back, err)
		}
	}
}

// Each bad device names what is wrong and what it wants.
func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct{ in, says string }{
		{`"floppy"`, `"floppy" is not a device profile; want one of none, hdd-2013, cloud-3000`},
		{`"custom"`, "not a device profile"},
		{`{"read_iops":0}`, "read_iops: 0: want a whole number of I/Os a second from 1 to 4294967294"},
		{`{"write_iops":-5}`, "write_iops: -5: want"},
		{`{"read_bps":-1}`, "read_bps: -1: want a whole number of bytes a second from 1 to 9223372036854775807"},
		{`{"read_iops":4294967295}`, "read_iops: 4294967295"},
		{`{"read_bps":9223372036854775808}`, "read_bps: 9223372036854775808"},
		{`{"read_iops":1.5}`, "read_iops: 1.5"},
		{`{"read_iops":"200"}`, `read_iops: want a whole number from 1 to 4294967294, got "200"`},
		{`{"read_iops":1e3}`, "read_iops: 1e3"},
		{`{"riops":200}`, "riops: unknown member; a device takes profile, read_iops, write_iops, read_bps, write_bps"},
		{`{}`, "want at least one of read_iops"},
		{`{"profile":"none","read_iops":5}`, "profile none takes no limits"},
		{`{"profile":"sdd"}`, `profile: "sdd" is not a device profile`},
		{`{"profile":7}`, "profile: want a profile's name"},
		{`7`, `want a profile's name such as "hdd-2013"`},
		{`null`, `want a profile's name such as "hdd-2013"`},
	} {
		var s Spec
		err := json.Unmarshal([]byte(tc.in), &s)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: error %v, want one saying %q", tc.in, err, tc.says)
		}
	}
}

func TestParseFlag(t *testing.T) {
	s, err := Parse("read_iops=200, write_bps=1048576")
	if err != nil || s != (Spec{Profile: Custom, Limits: Limits{ReadIOPS: 200, WriteBPS: 1 << 20}}) {
		t.Errorf("Parse: %+v, %v", s, err)
	}
	if s, err := Parse("hdd-2013"); err != nil || s.WriteIOPS != 120 {
		t.Errorf("Parse(hdd-2013): %+v, %v", s, err)
	}
	for in, says := range map[string]string{
		"read_iops=0":             "read_iops: 0: want",
		"riops=5":                 "riops: unknown limit",
		"read_iops=lots":          "read_iops: lots",
		"ssd":                     `"ssd" is not a device profile`,
		"read_iops=5,x=1":         "x: unknown limit",
		"read_iops=5,read_iops=9": "read_iops given twice",
	} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("Parse(%q): %v, want %q", in, err, says)
		}
	}
}

func TestString(t *testing.T) {
	s, _ := Named(HDD2013)
	if got := s.String(); got != "hdd-2013 (120 read I/Os, 120 write I/Os a second)" {
		t.Errorf("String() = %q", got)
	}
	if got := (Spec{}).String(); got != None {
		t.Errorf("the zero Spec is %q, want none", got)
	}
}

// A swap file's disk is the one its file system is on, a partition's the
// disk it is part of; this host's own swap areas resolve to whole disks.
func TestSwapDevicesOfThisHost(t *testing.T) {
	b, err := os.ReadFile("/proc/swaps")
	if err != nil {
		t.Fatalf("no /proc/swaps: %v", err)
	}
	devs, err := SwapDevices("/proc", "/sys")
	if strings.Count(string(b), "\n") < 2 {
		if err != ErrNoSwap {
			t.Errorf("no swap on: %v, want ErrNoSwap", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		dir, err := filepath.EvalSymlinks(filepath.Join("/sys/dev/block", d.Number))
		if err != nil {
			t.Errorf("%+v: %v", d, err)
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
			t.Errorf("%+v is a partition (%s), want its disk", d, dir)
		}
		if !strings.Contains(string(b), d.Swap) {
			t.Errorf("%+v: its swap is not in /proc/swaps:\n%s", d, b)
		}
	}
}

// A partition resolves to its disk through sysfs's links.
func TestWholeDisk(t *testing.T) {
	sys := t.TempDir()
	disk := filepath.Join(sys, "devices", "virtio1", "block", "vda")
	part := filepath.Join(disk, "vda2")
	for _, d := range []string{part, filepath.Join(sys, "dev", "block")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(disk, "dev"), []byte("254:0\n"), 0o644)
	os.WriteFile(filepath.Join(part, "dev"), []byte("254:2\n"), 0o644)
	os.WriteFile(filepath.Join(part, "partition"), []byte("2\n"), 0o644)
	os.Symlink(disk, filepath.Join(sys, "dev", "block", "254:0"))
	os.Symlink(part, filepath.Join(sys, "dev", "block", "254:2"))
	for in, want := range map[string]string{"254:2": "254:0", "254:0": "254:0"} {
		if got, err := wholeDisk(sys, in); err != nil || got != want {
			t.Errorf("wholeDisk(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	if _, err := wholeDisk(sys, "8:0"); err == nil || !strings.Contains(err.Error(), "block device 8:0") {
		t.Errorf("an unknown device: %v", err)
	}
}

func TestSwapDevicesRefuses(t *testing.T) {
	proc := t.TempDir()
	os.WriteFile(filepath.Join(proc, "swaps"), []byte("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"), 0o644)
	if _, err := SwapDevices(proc, "/sys"); err != ErrNoSwap {
		t.Errorf("no swap area: %v, want ErrNoSwap", err)
	}
	// A swap area gone from under its name is named.
	os.WriteFile(filepath.Join(proc, "swaps"), []byte("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n/nonexistent/swap\\040file file 1024 0 -2\n"), 0o644)
	if _, err := SwapDevices(proc, "/sys"); err == nil || !strings.Contains(err.Error(), "swap /nonexistent/swap file: stat") {
		t.Errorf("a missing swap file: %v", err)
	}
}

func TestEmulationValidate(t *testing.T) {
	good := Emulation{Devices: []Device{{Number: "254:0", Swap: "/swap"}}, Cgroup: "/sys/fs/cgroup/x", Controller: "blkio", Throttled: []string{Reads}, Note: NoteV1Writes}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := good.Summary(); got != "reads throttled on 254:0 (blkio); swap-outs not throttled on cgroup v1" {
		t.Errorf("Summary() = %q", got)
	}
	v2 := Emulation{Devices: good.Devices, Cgroup: "/sys/fs/cgroup/x", Controller: "io", Throttled: []string{Reads, Writes}, Note: NoteV2SwapWrites}
	if got := v2.Summary(); got != "reads and writes throttled on 254:0 (io); swap-outs held loosely (the kernel lets swap writes pass in debt)" {
		t.Errorf("Summary() = %q", got)
	}
	v2.Note = ""
	if got := v2.Summary(); got != "reads and writes throttled on 254:0 (io)" {
		t.Errorf("Summary() = %q", got)
	}
	for name, mut := range map[string]func(*Emulation){
		"no device":     func(e *Emulation) { e.Devices = nil },
		"controller":    func(e *Emulation) { e.Controller = "cpu" },
		"direction":     func(e *Emulation) { e.Throttled = []string{"sideways"} },
		"no direction":  func(e *Emulation) { e.Throttled = nil },
		"control chars": func(e *Emulation) { e.Note = "a\nb" },
	} {
		e := good
		e.Devices = append([]Device(nil), good.Devices...)
		mut(&e)
		if err := e.Validate(); err == nil {
			t.Errorf("%s: valid", name)
		}
	}
}

func TestReadTime(t *testing.T) {
	cases := []struct {
		l    Limits
		n    int64
		want time.Duration
	}{
		{Limits{}, 1 << 30, 0},
		{Limits{WriteIOPS: 10}, 1 << 30, 0},
		{Limits{ReadIOPS: 100}, 4096 * 250, 2500 * time.Millisecond},
		{Limits{ReadIOPS: 100}, 4097, 20 * time.Millisecond}, // a part page is a read
		{Limits{ReadIOPS: 1000, ReadBPS: 1 << 20}, 4 << 20, 4 * time.Second},
	}
	for _, c := range cases {
		if got := c.l.ReadTime(c.n); got != c.want {
			t.Errorf("%+v reading %d bytes: %s, want %s", c.l, c.n, got, c.want)
		}
	}
}

// TestSwapWritesInDebt: blk-throttle lets swap writes past io.max in debt
// from Linux 6.12 (uname -r as distributions spell it).
func TestSwapWritesInDebt(t *testing.T) {
	for release, want := range map[string]bool{
		"5.10.0-35-amd64":       false,
		"6.1.0-41-amd64":        false,
		"6.11.9":                false,
		"6.12.57+deb13-amd64":   true,
		"6.18.0":                true,
		"7.0.0-rc1":             true,
		"4.19.0-27-cloud-amd64": false,
		"":                      false,
		"not-a-release":         false,
	} {
		if got := SwapWritesInDebt(release); got != want {
			t.Errorf("SwapWritesInDebt(%q) = %v, want %v", release, got, want)
		}
	}
}

package main

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseStatCPUTicks(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    uint64
		wantErr bool
	}{
		{
			name: "plain",
			in:   "123 (observer) S 1 123 123 0 -1 4194560 100 0 0 0 40 2 0 0 20 0 9 0 1042 1290305536 5120\n",
			want: 42,
		},
		{
			name: "command name with spaces and parentheses",
			in:   "123 (a) b (c) R 1 123 123 0 -1 0 0 0 0 0 7 8 0 0 20 0 1 0 1 1 1",
			want: 15,
		},
		{name: "truncated", in: "123 (observer) S 1 123 123 0 -1 4194560 100 0 0 0 40", wantErr: true},
		{name: "no command name", in: "123 observer S 1", wantErr: true},
		{name: "not a number", in: "123 (observer) S 1 123 123 0 -1 0 0 0 0 0 x 2", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatCPUTicks(strings.NewReader(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("ticks = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestParseStatusMem(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		want      memStatus
		wantErr   bool
		wantNoFld bool
	}{
		{
			name: "user process",
			in:   "Name:\tobserver\nVmPeak:\t  900 kB\nVmHWM:\t   3072 kB\nVmRSS:\t   2048 kB\nThreads:\t9\n",
			want: memStatus{RSSKiB: 2048, HWMKiB: 3072},
		},
		{name: "kernel thread has no Vm lines", in: "Name:\tkthreadd\nThreads:\t1\n", wantErr: true, wantNoFld: true},
		{name: "unexpected unit", in: "VmHWM:\t3 MB\nVmRSS:\t2 MB\n", wantErr: true},
		{name: "bad number", in: "VmHWM:\tlots kB\nVmRSS:\t2 kB\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatusMem(strings.NewReader(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantNoFld && !errors.Is(err, errNoField) {
				t.Errorf("err = %v, want errNoField", err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestReadProcessFixture(t *testing.T) {
	ticks, err := readProcessCPUTicks("testdata/proc", 4242)
	if err != nil {
		t.Fatal(err)
	}
	if ticks != 731+268 {
		t.Errorf("ticks = %d, want %d", ticks, 731+268)
	}
	m, err := readProcessMem("testdata/proc", 4242)
	if err != nil {
		t.Fatal(err)
	}
	if want := (memStatus{RSSKiB: 20480, HWMKiB: 24576}); m != want {
		t.Errorf("mem = %+v, want %+v", m, want)
	}
	if _, err := readProcessCPUTicks("testdata/proc", 1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing pid: err = %v, want ErrNotExist", err)
	}
}

func TestAuxvClockTicks(t *testing.T) {
	auxv := func(pairs ...uint64) []byte {
		var b []byte
		for _, v := range pairs {
			b = binary.NativeEndian.AppendUint64(b, v)
		}
		return b
	}
	tests := []struct {
		name   string
		in     []byte
		want   uint64
		wantOK bool
	}{
		{"present", auxv(6, 4096, 17, 100, 0, 0), 100, true},
		{"other rate", auxv(17, 250, 0, 0), 250, true},
		{"after AT_NULL is ignored", auxv(6, 4096, 0, 0, 17, 100), 0, false},
		{"absent", auxv(6, 4096), 0, false},
		{"zero is no answer", auxv(17, 0, 0, 0), 0, false},
		{"truncated", auxv(6, 4096)[:12], 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := auxvClockTicks(tt.in)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("auxvClockTicks = %d, %v; want %d, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// The tick rate read here turns /proc's CPU ticks into the seconds the
// kernel itself counts for this process (getrusage): the two agree within
// two ticks and 10 % after a few hundred milliseconds of work.
func TestClockTicksPerSecondHere(t *testing.T) {
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := auxvClockTicks(b); !ok {
		t.Fatal("this process's auxiliary vector has no AT_CLKTCK")
	}
	hz := clockTicksPerSecond()
	cpu := func() float64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	// The kernel counts CPU time, so spend some (on a busy host the wall
	// clock says little of it).
	for deadline := time.Now().Add(time.Minute); cpu() < 0.4; {
		if time.Now().After(deadline) {
			t.Fatal("this process got under 0.4 s of CPU in a minute")
		}
	}
	ticks, err := readProcessCPUTicks("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	kernel := cpu()
	fromTicks := float64(ticks) / float64(hz)
	if slack := 2/float64(hz) + 0.1*kernel; math.Abs(fromTicks-kernel) > slack {
		t.Errorf("%d ticks at %d a second = %.3f s of CPU; getrusage says %.3f s (want within %.3f s)", ticks, hz, fromTicks, kernel, slack)
	}
}

func TestSelfCostFigures(t *testing.T) {
	tests := []struct {
		name string
		in   selfCost
		want selfCostFigures
	}{
		{
			name: "half a percent",
			in:   selfCost{CPUTicks: 5, Seconds: 10, RSSKiB: 15 * 1024, HWMKiB: 20 * 1024},
			want: selfCostFigures{CPUPercent: 0.5, RSSMiB: 15, PeakRSSMiB: 20, CPUTicks: 5, Seconds: 10},
		},
		{name: "empty window", in: selfCost{}, want: selfCostFigures{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.figures(100); got != tt.want {
				t.Errorf("figures = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSelfCostAdd(t *testing.T) {
	a := selfCost{CPUTicks: 3, Seconds: 5, RSSKiB: 100, HWMKiB: 400}
	b := selfCost{CPUTicks: 4, Seconds: 6, RSSKiB: 200, HWMKiB: 300}
	want := selfCost{CPUTicks: 7, Seconds: 11, RSSKiB: 200, HWMKiB: 400}
	if got := a.add(b); got != want {
		t.Errorf("add = %+v, want %+v", got, want)
	}
}

func TestSelfCostSamplerOnFixture(t *testing.T) {
	s, err := startSelfCost("testdata/proc", 4242)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.finish()
	if err != nil {
		t.Fatal(err)
	}
	// The fixture never changes: no CPU used, memory as written.
	if c.CPUTicks != 0 || c.RSSKiB != 20480 || c.HWMKiB != 24576 || c.Seconds <= 0 {
		t.Errorf("cost = %+v", c)
	}
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// The workloads without a cgroup of their own need no privileges: run each
// briefly and check it counts.
func TestWorkloadsCount(t *testing.T) {
	for _, name := range workloadNames {
		if cgroupLimits[name] > 0 {
			continue // TestSwapinWorkloadInACgroup
		}
		t.Run(name, func(t *testing.T) {
			started := false
			ops, elapsed, err := workloadFuncs[name](10*time.Millisecond, 100*time.Millisecond, func() { started = true })
			if err != nil {
				t.Fatal(err)
			}
			if !started {
				t.Error("started was never called")
			}
			if ops == 0 || elapsed < 100*time.Millisecond {
				t.Errorf("ops=%d elapsed=%v, want ops>0 over at least 100ms", ops, elapsed)
			}
			t.Logf("%s: %.0f ops/s", name, float64(ops)/elapsed.Seconds())
		})
	}
}

func TestRunWorkloadCommand(t *testing.T) {
	var out strings.Builder
	if err := runWorkloadCommand([]string{"faults", "--warmup", "0s", "--duration", "50ms"}, &out); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) != 2 {
		t.Fatalf("output %q, want a start line and a result line", out.String())
	}
	if start, _, err := parseChildLine(lines[0]); err != nil || !start {
		t.Errorf("first line %q is not the start marker", lines[0])
	}
	_, res, err := parseChildLine(lines[1])
	if err != nil {
		t.Fatal(err)
	}
	if res.Workload != "faults" || res.Ops == 0 || res.OpsPerSec <= 0 {
		t.Errorf("result = %+v", res)
	}
}

func TestRunWorkloadCommandErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no name", nil, "usage"},
		{"unknown", []string{"disk"}, `unknown workload "disk"`},
		{"bad duration", []string{"faults", "--duration", "0s"}, "--duration must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			err := runWorkloadCommand(tt.args, &out)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestParseChildLine(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		wantStart bool
		wantOps   uint64
		wantErr   bool
	}{
		{name: "start", in: "start\n", wantStart: true},
		{name: "result", in: `{"workload":"faults","ops":42,"seconds":1,"ops_per_sec":42}`, wantOps: 42},
		{name: "noise", in: "hello", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start, res, err := parseChildLine(tt.in)
			if (err != nil) != tt.wantErr || start != tt.wantStart {
				t.Fatalf("start=%v err=%v", start, err)
			}
			if tt.wantOps != 0 && (res == nil || res.Ops != tt.wantOps) {
				t.Errorf("result = %+v, want ops %d", res, tt.wantOps)
			}
		})
	}
}

// swapin runs in a memory cgroup the benchmark makes for it: its faults
// are swap-ins, counted, and the cgroup is gone afterwards.
func TestSwapinWorkloadInACgroup(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	b := &bench{cfg: config{Exe: testBinary(t), Warmup: 0, Duration: 300 * time.Millisecond}, logger: quietLogger()}
	res, err := b.runChild(context.Background(), "swapin", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A swap-in takes 10-100 µs here: thousands in 300 ms.
	if res.Ops < 100 {
		t.Errorf("swapin took %d major faults in %.2fs, want hundreds at least", res.Ops, res.Seconds)
	}
	t.Logf("swapin: %.0f major faults/s", res.OpsPerSec)
	parent, err := cgroup.Own("/proc")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(parent.Path)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), fmt.Sprintf("%sbench-%d-", cgroup.Prefix, os.Getpid())) {
			t.Errorf("cgroup %s left behind", e.Name())
		}
	}
}

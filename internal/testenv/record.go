package testenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/run"
)

// Record is a valid run record for tests that save and read records back:
// an e4 run at scale 0.1 in the given state, without consumers.
func Record(id, state string, started time.Time) run.Record {
	spec, err := run.Resolve(run.Spec{Preset: "e4", Scale: new(0.1)})
	if err != nil {
		panic(err) // the preset is a constant
	}
	return run.Record{ID: id, Spec: spec, State: state, StartedAt: started}
}

// OnlyRecord is the record of the one run a command (loadgen run, fill)
// left under out, and its directory.
func OnlyRecord(t *testing.T, out string) (run.Record, string) {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(out, "runs", "*"))
	if len(dirs) != 1 {
		t.Fatalf("want one run directory under %s, got %v", out, dirs)
	}
	b, err := os.ReadFile(filepath.Join(dirs[0], "record.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec run.Record
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("record.json: %v", err)
	}
	return rec, dirs[0]
}

// NoneAlive fails t if a run left a consumer process or its cgroup behind.
func NoneAlive(t *testing.T, rec run.Record) {
	t.Helper()
	pids := map[int]string{}
	for _, c := range rec.Consumers {
		if c.PID != 0 {
			pids[c.PID] = fmt.Sprintf("consumer %d", c.Index)
		}
	}
	if rec.Alone != nil {
		pids[rec.Alone.PID] = "the consumer that ran alone"
	}
	for pid, who := range pids {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); err == nil && strings.HasPrefix(string(b), "consumer-") {
			t.Errorf("%s (pid %d) outlived the run", who, pid)
		}
	}
	if _, err := os.Stat(rec.Cgroup); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run cgroup %s left behind", rec.Cgroup)
	}
}

// ChildrenOf lists the pids whose parent is ppid, by comm.
func ChildrenOf(ppid int) map[string]int {
	out := map[string]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		s := string(b)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < open {
			continue
		}
		f := strings.Fields(s[closing+2:])
		if len(f) < 2 || f[1] != strconv.Itoa(ppid) {
			continue
		}
		pid, _ := strconv.Atoi(strings.Fields(s)[0])
		out[s[open+1:closing]] = pid
	}
	return out
}

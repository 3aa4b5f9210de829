package diagnosis

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/thrashscope/thrashscope/internal/kernfile"
	"github.com/thrashscope/thrashscope/internal/workload"
)

// memoReader reads each file once a sample, keeping what it read, error
// included: the thrashing groups under one limit share its files and those
// of every group above it. It reads through set, whose files stay open
// between samples (a read is a pread from 0), or with os.ReadFile where
// set is nil.
type memoReader struct {
	m   map[string]memoRead
	set *kernfile.Set
}

type memoRead struct {
	b   []byte
	err error
}

func newMemo() memoReader { return memoReader{m: map[string]memoRead{}} }

func (r memoReader) ReadFileAt(dir, name string) ([]byte, error) {
	k := dir + "\x00" + name
	if got, ok := r.m[k]; ok {
		return got.b, got.err
	}
	var b []byte
	var err error
	if r.set != nil {
		b, err = r.set.ReadFileAt(dir, name)
		b = bytes.Clone(b) // the set's buffer is its next read's
	} else {
		b, err = os.ReadFile(filepath.Join(dir, name))
	}
	r.m[k] = memoRead{b, err}
	return b, err
}

// seed keeps a workload's own limits and charge as the workload's stage
// read them this sample, so that its limits are not read again: the files
// of the directory it read them in, those it read without a fault.
func (r memoReader) seed(f workload.Files, k workload.Kernel) {
	type file struct {
		name  string
		bytes int64
	}
	dir, files := f.V1Memory, []file{{"memory.usage_in_bytes", k.CurrentBytes}, {"memory.limit_in_bytes", k.MaxBytes}}
	if dir == "" {
		dir, files = f.V2, []file{{"memory.current", k.CurrentBytes}, {"memory.max", k.MaxBytes}, {"memory.high", k.HighBytes}}
	}
	if dir == "" || k.CurrentBytes < 0 {
		return
	}
	for _, fl := range files {
		if slices.ContainsFunc(k.Missing, func(m string) bool {
			return strings.HasPrefix(m, fl.name+" ") || strings.HasPrefix(m, fl.name+",")
		}) {
			continue
		}
		text := "max" // unlimited: v1's ceiling is read as -1 too
		if fl.bytes >= 0 {
			text = strconv.FormatInt(fl.bytes, 10)
		}
		r.m[dir+"\x00"+fl.name] = memoRead{b: []byte(text)}
	}
}

// readPIDs lists the processes in the cgroup2 group dir and its
// descendants, at most maxPIDs.
func readPIDs(r Reader, dir string) []int {
	var pids []int
	if dir != "" {
		pidsUnder(r, dir, &pids)
	}
	return pids
}

// pidsUnder appends the processes of the group at dir and of every group
// below it, at most maxPIDs: each group's cgroup.procs, then, where its
// cgroup.stat counts descendants, its subdirectories (a leaf, the usual
// thrashing group, is not listed).
func pidsUnder(r Reader, dir string, pids *[]int) {
	if len(*pids) >= maxPIDs {
		return
	}
	b, err := r.ReadFileAt(dir, "cgroup.procs")
	if err != nil {
		return
	}
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && len(*pids) < maxPIDs {
			*pids = append(*pids, pid)
		}
	}
	if st, err := r.ReadFileAt(dir, "cgroup.stat"); err == nil && bytes.Contains(st, []byte("nr_descendants 0\n")) {
		return
	}
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	ents, _ := d.ReadDir(-1)
	d.Close()
	for _, e := range ents {
		if e.IsDir() {
			pidsUnder(r, filepath.Join(dir, e.Name()), pids)
		}
	}
}

package procfs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// RunDelay is the time the process's threads have waited on a run queue,
// runnable but not running, summed over its threads alive now: the second
// field of each /proc/<pid>/task/<tid>/schedstat. A thread that exited
// takes its delay with it.
func (fs FS) RunDelay(pid int) (time.Duration, error) {
	dir := filepath.Join(fs.path, strconv.Itoa(pid), "task")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum uint64
	var buf [128]byte
	for _, e := range ents {
		f, err := os.Open(filepath.Join(dir, e.Name(), "schedstat"))
		if err != nil {
			continue // the thread exited
		}
		n, _ := f.Read(buf[:])
		f.Close()
		fields := bytes.Fields(buf[:n])
		if len(fields) < 2 {
			continue
		}
		v, err := strconv.ParseUint(string(fields[1]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %q is not a run delay", dir, e.Name(), fields[1])
		}
		sum += v
	}
	return time.Duration(sum), nil
}

package procfs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// RunDelay is the time the process's threads have waited on a run queue,
// runnable but not running, summed over its threads alive now: the second
// field of each /proc/<pid>/task/<tid>/schedstat. A thread that exited
// takes its delay with it.
//
// The thread files are opened relative to the task directory, without an
// *os.File each: every thread of every process with a working set is read
// at each of its windows.
func (fs FS) RunDelay(pid int) (time.Duration, error) {
	dir := filepath.Join(fs.path, strconv.Itoa(pid), "task")
	d, err := os.Open(dir)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	tids, err := d.Readdirnames(-1)
	if err != nil {
		return 0, err
	}
	dfd := int(d.Fd())
	var sum uint64
	var buf [128]byte
	for _, tid := range tids {
		fd, err := unix.Openat(dfd, tid+"/schedstat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // the thread exited
		}
		n, _ := unix.Read(fd, buf[:])
		unix.Close(fd)
		fields := bytes.Fields(buf[:max(n, 0)])
		if len(fields) < 2 {
			continue
		}
		v, err := strconv.ParseUint(string(fields[1]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %q is not a run delay", dir, tid, fields[1])
		}
		sum += v
	}
	return time.Duration(sum), nil
}

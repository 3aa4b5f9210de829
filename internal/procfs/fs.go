// Package procfs reads the system-wide and per-process memory and CPU
// signals from a procfs mount. It is the procfs source in the data flow
// kernel → probe/procfs readers → indicators → metrics: the fallback when
// BPF is unavailable, and the source of counters BPF does not see.
package procfs

import (
	"errors"
	"fmt"

	promprocfs "github.com/prometheus/procfs"
)

// ErrProcessGone means the process exited while it was being read; callers
// drop its series instead of reporting an error.
var ErrProcessGone = errors.New("process gone")

// ErrNoData means the kernel does not provide the source at all (for example
// no /proc/pressure), which is not a failure.
var ErrNoData = errors.New("no data")

// FS is a procfs mount, normally /proc, or a fixture tree in tests.
type FS struct {
	proc promprocfs.FS
	path string
}

// NewFS opens the procfs mounted at procPath.
func NewFS(procPath string) (FS, error) {
	fs, err := promprocfs.NewFS(procPath)
	if err != nil {
		return FS{}, fmt.Errorf("procfs at %q is not usable (check --path.procfs): %w", procPath, err)
	}
	return FS{proc: fs, path: procPath}, nil
}

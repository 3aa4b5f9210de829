package settings

import (
	"errors"
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// hostLockName is an abstract Unix socket's name: bound, it says a
// thrashscope process is changing the host's settings. The kernel frees
// it when that process dies, and it leaves no file behind.
const hostLockName = "@thrashscope/host-settings"

// hostLock takes the host's settings for this process, or says that
// another thrashscope process holds them (in this network namespace).
func hostLock() (io.Closer, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the host settings' lock: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: hostLockName}); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EADDRINUSE) {
			return nil, errors.New("another thrashscope process is running a run under host-wide settings: wait for it to end")
		}
		return nil, fmt.Errorf("the host settings' lock: %w", err)
	}
	return fdCloser(fd), nil
}

type fdCloser int

func (f fdCloser) Close() error { return unix.Close(int(f)) }

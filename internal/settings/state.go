package settings

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/thrashscope/thrashscope/internal/outdir"
)

// DefaultStateDir is where every thrashscope process on a host keeps the
// lock on the host's settings and the journal of its changes. It is one
// place per host, whatever the data directories, so that any thrashscope
// process recovers any other's journal. It lives under /run: a reboot
// resets the kernel settings it guards, and clears it with them.
const DefaultStateDir = "/run/thrashscope"

// lockFile is the lock's name in the state directory.
const lockFile = "host-settings.lock"

// State is the host's settings state directory, open: root-owned (the
// running user's), writable by no one else, so that neither its lock nor
// its journal can be taken or planted by an unprivileged user.
type State struct {
	dir *outdir.Dir
}

// OpenState makes path (mode 0700) when it is missing and opens it; it
// refuses a directory another user owns or that its group or others can
// write.
func OpenState(path string) (*State, error) {
	d, err := outdir.Open(path, 0o700)
	if err != nil {
		return nil, fmt.Errorf("the host settings' state directory: %w", err)
	}
	if err := d.Private(); err != nil {
		d.Close()
		return nil, fmt.Errorf("the host settings' state directory: %w", err)
	}
	return &State{dir: d}, nil
}

// Path is the directory.
func (s *State) Path() string { return s.dir.Path() }

// Close closes the directory; a nil State is none.
func (s *State) Close() error {
	if s == nil {
		return nil
	}
	return s.dir.Close()
}

// ErrBusy says another thrashscope process holds the host's settings.
var ErrBusy = errors.New("another thrashscope process is changing or restoring the host's settings: wait for its run to end")

// Lock takes the host's settings for this process: an exclusive flock(2)
// on a file of the state directory, which every process that shares the
// directory sees, whatever its network or PID namespace, and which the
// kernel frees when the process dies. ErrBusy when another holds it.
func (s *State) Lock() (*os.File, error) {
	f, err := s.dir.OpenFile(lockFile, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the host settings' lock: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("the host settings' lock %s/%s is not a regular file: remove it", s.Path(), lockFile)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrBusy
		}
		return nil, fmt.Errorf("the host settings' lock: %w", err)
	}
	return f, nil
}

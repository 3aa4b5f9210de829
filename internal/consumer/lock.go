package consumer

import (
	"errors"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// regionLock carries lock requests from the control pipe's reader to the
// region, which may not be mapped yet: a request before the mapping
// applies once it is, and the answer (KindLocked) goes on the message pipe.
type regionLock struct {
	mu     sync.Mutex
	region []byte
	want   bool
	held   bool
	send   func(Message) error
}

// request records what the master asked for and applies it.
func (l *regionLock) request(lock bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.want = lock
	l.apply()
}

// attach is the region mapped; a pending request applies now.
func (l *regionLock) attach(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.region = b
	if l.send != nil {
		_ = l.send(Message{Kind: KindRegion, A: int64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))), B: int64(len(b))})
	}
	l.apply()
}

// detach is the region about to be unmapped (which unlocks it).
func (l *regionLock) detach() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.region, l.held = nil, false
}

// apply locks or unlocks the region to match the request, and answers.
// Called with l.mu held.
func (l *regionLock) apply() {
	if l.region == nil || l.want == l.held {
		return
	}
	var err error
	if l.want {
		err = mlockOnFault(l.region)
	} else {
		err = unix.Munlock(l.region)
	}
	if err == nil {
		l.held = l.want
	}
	m := Message{Kind: KindLocked}
	if l.held {
		m.A = 1
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		m.B = int64(errno)
	}
	if l.send != nil {
		_ = l.send(m)
	}
}

// mlockOnFault is mlock2(b, MLOCK_ONFAULT), which x/sys/unix does not wrap.
func mlockOnFault(b []byte) error {
	_, _, e := unix.Syscall(unix.SYS_MLOCK2, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), unix.MLOCK_ONFAULT)
	if e != 0 {
		return e
	}
	return nil
}

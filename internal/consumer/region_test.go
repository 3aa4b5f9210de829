package consumer

import (
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A region's madvise and munlock are retried while the kernel says EAGAIN,
// and only then.
func TestRetryAgain(t *testing.T) {
	calls := 0
	err := retryAgain(time.Second, time.Millisecond, func() error {
		if calls++; calls < 3 {
			return unix.EAGAIN
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("EAGAIN twice, then done: %v after %d calls, want nil after 3", err, calls)
	}

	calls = 0
	err = retryAgain(time.Second, time.Millisecond, func() error { calls++; return unix.EINVAL })
	if !errors.Is(err, unix.EINVAL) || calls != 1 {
		t.Errorf("EINVAL: %v after %d calls, want it at once", err, calls)
	}

	calls = 0
	err = retryAgain(20*time.Millisecond, time.Millisecond, func() error { calls++; return unix.EAGAIN })
	if !errors.Is(err, unix.EAGAIN) || !strings.Contains(err.Error(), "times over 20ms") || calls < 2 {
		t.Errorf("EAGAIN throughout: %v after %d calls, want EAGAIN naming how long it tried", err, calls)
	}
}

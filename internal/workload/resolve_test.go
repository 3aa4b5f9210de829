package workload

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"

	"github.com/thrashscope/thrashscope/internal/testenv"
)

// ownGroup is this process's cgroup2 path and its directory's inode, the
// id the kernel gives it.
func ownGroup(t *testing.T) (cgroup.Hierarchy, string, uint64) {
	t.Helper()
	h, err := cgroup.UnifiedHierarchy("/proc")
	if err != nil {
		testenv.Unavailable(t, fmt.Sprintf("no cgroup2 mount here: %v: mount cgroup2", err))
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	own := ""
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			own = p
		}
	}
	if own == "" {
		testenv.Unavailable(t, "no cgroup2 line in /proc/self/cgroup: mount cgroup2")
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(h.Point, strings.TrimPrefix(own, h.Root)), &st); err != nil {
		t.Fatal(err)
	}
	return h, own, st.Ino
}

// The resolver names a cgroup id by its path, by handle where it may and
// by walking the hierarchy where it may not; an id no cgroup has is gone.
func TestResolverNamesOwnGroup(t *testing.T) {
	h, own, id := ownGroup(t)
	for _, walk := range []bool{false, true} {
		r, err := NewResolver(h)
		if err != nil {
			t.Fatal(err)
		}
		if walk {
			r.Close() // as where handles are refused
		}
		got, err := r.Path(id)
		if err != nil || got != own {
			t.Errorf("walk %v: Path(%d) = %q, %v; want %q", walk, id, got, err, own)
		}
		if !r.Check(id) {
			t.Errorf("walk %v: Check says the own group is gone", walk)
		}
		if _, err := r.Path(1 << 62); err != ErrGone {
			t.Errorf("walk %v: an id no cgroup has: %v, want ErrGone", walk, err)
		}
		r.Close()
	}
}

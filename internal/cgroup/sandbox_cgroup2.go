package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// settingsV2 sets the limit and leaves swap open (an anon thrash needs it).
// memory.oom.group is written 0 on purpose: a thrashing memcg can OOM with
// swap still free (reclaim runs out of retries), and the run records which
// consumer the kernel chose, as on v1, rather than losing every consumer to
// one kill.
func settingsV2(l Limits) []setting {
	swap := "max"
	if l.NoSwap {
		swap = "0"
	}
	return []setting{
		{file: "memory.max", value: strconv.FormatInt(l.MemoryBytes, 10)},
		{file: "memory.swap.max", value: swap, optional: true},
		{file: "memory.oom.group", value: "0"},
	}
}

// checkV2 wants memory enabled for the parent's children. We never enable
// it ourselves: that would be a write to a cgroup we did not create.
func checkV2(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return err
	}
	if !slices.Contains(strings.Fields(string(b)), "memory") {
		return fmt.Errorf("the memory controller is not enabled for its children: enable memory in %s/cgroup.subtree_control, or set --cgroup.parent to a delegated cgroup (systemd Delegate=yes)", dir)
	}
	return nil
}

// FD opens the cgroup for clone3's CLONE_INTO_CGROUP
// (syscall.SysProcAttr.UseCgroupFD and CgroupFD), which starts a child
// already inside, with no window outside the limit. Only cgroup v2 has it;
// on v1 start the child, Add it, then let it allocate. The caller closes
// the descriptor.
func (c *Cgroup) FD() (int, error) {
	if !c.V2 {
		return -1, errors.New("cgroup FD: cgroup v1 cannot start a process inside a cgroup; Add the child before it allocates")
	}
	fd, err := unix.Open(c.Path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening cgroup %s: %w", c.Path, err)
	}
	return fd, nil
}

package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/thrashscope/thrashscope/internal/kernfile"
)

// The cgroup v2 freezer (Linux 5.2): cgroup.freeze in every non-root group
// of the unified hierarchy, whatever hierarchy the memory controller is on.
// A frozen process can still be killed by SIGKILL (a consumer's
// PR_SET_PDEATHSIG when the observer dies), so nothing is left frozen by a
// crash; the v1 freezer has no such exit and is not used.

// CreateFreezeGroup makes <parent>/<Prefix><name> on cgroup v2 with no
// limit, for processes whose memory cgroup is on v1 to be frozen and thawed
// through its children (see Freeze). It fails, naming the fix, when the
// kernel has no cgroup v2 freezer.
func (p Parent) CreateFreezeGroup(name string) (*Cgroup, error) {
	if !p.V2 {
		return nil, fmt.Errorf("creating a freeze group under %s: it is on cgroup v1; the freezer thrashscope uses is cgroup v2's: mount cgroup2 (e.g. at /sys/fs/cgroup/unified)", p.Path)
	}
	g, err := p.create(name, nil)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(g.Path, "cgroup.freeze")); err != nil {
		_ = g.Destroy(context.Background())
		return nil, fmt.Errorf("creating a freeze group under %s: no cgroup.freeze (%w): the kernel has no cgroup v2 freezer (Linux 5.2)", p.Path, errno(err))
	}
	return g, nil
}

// ErrThawed is Freeze's error when a Thaw came before the kernel had
// frozen every task.
var ErrThawed = errors.New("thawed before every task had stopped")

// freezeWait bounds how long Freeze waits for every task to stop.
const freezeWait = 5 * time.Second

// Freeze stops every process in the cgroup (v2) and waits until the kernel
// reports it frozen (cgroup.events "frozen 1"), or ctx ends.
func (c *Cgroup) Freeze(ctx context.Context) error {
	if err := c.setFrozen(true); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, freezeWait)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		frozen, err := c.Frozen()
		if err != nil || frozen {
			return err
		}
		// A thaw meanwhile undid it: the kernel will never say frozen.
		if b, err := os.ReadFile(filepath.Join(c.Path, "cgroup.freeze")); err == nil && strings.TrimSpace(string(b)) == "0" {
			return fmt.Errorf("freezing cgroup %s: %w", c.Path, ErrThawed)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("freezing cgroup %s: not frozen yet: %w", c.Path, ctx.Err())
		case <-tick.C:
		}
	}
}

// Thaw lets the processes of a frozen cgroup (v2) run again. A cgroup
// already gone is thawed.
func (c *Cgroup) Thaw() error {
	err := c.setFrozen(false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func (c *Cgroup) setFrozen(on bool) error {
	if err := c.owned(); err != nil {
		return err
	}
	if !c.V2 {
		return fmt.Errorf("freezing cgroup %s: it is on cgroup v1; thrashscope freezes through cgroup v2's cgroup.freeze", c.Path)
	}
	v := map[bool]string{true: "1", false: "0"}[on]
	if err := kernfile.WriteFile(filepath.Join(c.Path, "cgroup.freeze"), []byte(v)); err != nil {
		return fmt.Errorf("writing %s to %s/cgroup.freeze: %w", v, c.Path, hint(err))
	}
	return nil
}

// Frozen reports whether the kernel says the cgroup is frozen: every task
// in it stopped (cgroup.events).
func (c *Cgroup) Frozen() (bool, error) {
	b, err := os.ReadFile(filepath.Join(c.Path, "cgroup.events"))
	if err != nil {
		return false, fmt.Errorf("reading cgroup %s: %w", c.Path, err)
	}
	n, ok, err := keyedValue(string(b), "frozen")
	if err != nil || !ok {
		return false, fmt.Errorf("reading cgroup %s: cgroup.events has no frozen line: %w", c.Path, errors.Join(err, errors.ErrUnsupported))
	}
	return n == 1, nil
}

package observer

import (
	"log/slog"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
)

// The releaser unmaps at the first tick and at the first tick after a run,
// not at every tick nor when a run starts.
func TestCodeReleaserReleasesAtStartAndAfterARun(t *testing.T) {
	c := newCodeReleaser(slog.New(slog.DiscardHandler))
	idle := &pipeline.Tick{}
	running := &pipeline.Tick{Scope: indicators.Scope{PIDs: []int{1}, LimitBytes: 1 << 30}}
	for i, step := range []struct {
		prev, cur *pipeline.Tick
		want      uint64
	}{
		{nil, idle, 1},
		{idle, idle, 1},
		{idle, running, 1},
		{running, running, 1},
		{running, idle, 2},
		{idle, idle, 2},
	} {
		c.Observe(step.prev, step.cur)
		// A release runs in the background: wait for it, then for any
		// that should not have begun.
		deadline := time.Now().Add(5 * time.Second)
		for c.busy.Load() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if got := c.releases.Load(); got != step.want {
			t.Fatalf("after tick %d: %d releases, want %d", i, got, step.want)
		}
	}
}

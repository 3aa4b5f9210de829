package observer

import (
	"log/slog"
	"sync/atomic"

	"github.com/thrashscope/thrashscope/internal/codepages"
	"github.com/thrashscope/thrashscope/internal/pipeline"
)

// codeReleaser gives back the binary's pages that ran once (package
// codepages): before the probes load (the start's initialisers and flags),
// at the first sample (the loading and the set-up), and at the first
// sample after a run (its set-up and teardown). It is a pipeline sink; the
// release itself runs on its own goroutine, one at a time.
type codeReleaser struct {
	logger  *slog.Logger
	busy    atomic.Bool
	started bool
	// releases counts the releases done, for tests.
	releases atomic.Uint64
}

func newCodeReleaser(logger *slog.Logger) *codeReleaser {
	return &codeReleaser{logger: logger}
}

// Observe releases at the first tick and at the first tick without the
// run the tick before it had.
func (c *codeReleaser) Observe(prev, cur *pipeline.Tick) {
	switch {
	case !c.started:
		c.started = true
		c.release("started")
	case prev != nil && runActive(prev) && !runActive(cur):
		c.release("run ended")
	}
}

func runActive(t *pipeline.Tick) bool {
	return t.Scope.LimitBytes > 0 || len(t.Scope.PIDs) > 0
}

// release runs codepages.Release in the background, unless one is running.
func (c *codeReleaser) release(why string) {
	if !c.busy.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer c.busy.Store(false)
		c.releaseNow(why)
	}()
}

func (c *codeReleaser) releaseNow(why string) {
	r, err := codepages.Release()
	if err != nil {
		c.logger.Warn("could not unmap the binary's pages that ran once; its RSS stays higher (--no-runtime.release-code turns this off)", "err", err)
		return
	}
	c.releases.Add(1)
	c.logger.Debug("unmapped the binary's pages that ran once", "when", why, "resident_bytes", r.Bytes, "mappings", r.Mappings, "kept_with_private_pages", r.Kept)
}

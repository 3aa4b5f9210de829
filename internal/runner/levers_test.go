package runner

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/consumer"
	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// The levers of a TPF run where memory is on cgroup v1: a protection is
// the consumer's own lock, asked for on its control pipe; each action is
// recorded as a decision, with the reason it failed; the run's end
// releases what is held. No run and no root: the control pipe is a buffer.
func TestLeversOfAProtectingPolicy(t *testing.T) {
	spec := run.Resolved{Policy: "tpf", SizeBytes: 10 << 20, MemoryLimitBytes: 100 << 20}
	// Unified: a parent that cannot hold groups (v1), so that the test
	// makes none: the run goes on without a group there.
	g, err := newLevers(execConfig{ID: "t", Spec: spec, Unified: &cgroup.Parent{}, Logger: slog.New(slog.DiscardHandler)}, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if g.protection != ProtectMlock || g.unifiedRoot != nil || g.set[0].group != nil {
		t.Fatalf("protection %q, unified root %v: want mlock and no freezer on v1 for tpf", g.protection, g.unifiedRoot)
	}
	var ctl bytes.Buffer
	if err := g.attach(0, os.Getpid(), &ctl); err != nil { // consumer 0 runs; 1 has not started
		t.Fatal(err)
	}
	now := func() time.Time { return time.Unix(100, 0) }
	ctx := context.Background()
	for _, c := range []struct {
		action    policy.Action
		wantErr   string // "" for none
		wantBytes []byte
		protected int
	}{
		{policy.Action{Kind: policy.Protect, Consumer: 0, Why: "lowest fault rate"}, "", []byte{byte(consumer.ControlLock)}, 1},
		{policy.Action{Kind: policy.Protect, Consumer: 1}, "it is not running", nil, 1},
		{policy.Action{Kind: policy.Freeze, Consumer: 0}, "the run has no freezer", nil, 1},
		{policy.Action{Kind: policy.Protect, Consumer: 5}, "no consumer 5", nil, 1},
		{policy.Action{Kind: policy.Release, Consumer: 0}, "", []byte{byte(consumer.ControlUnlock)}, 0},
		{policy.Action{Kind: policy.Release, Consumer: 1}, "", nil, 0}, // not running: nothing is locked
	} {
		ctl.Reset()
		d, _ := g.act(ctx, c.action, now)
		if d.Kind != string(c.action.Kind) || d.Consumer != c.action.Consumer || !d.At.Equal(now()) || d.Why != c.action.Why {
			t.Errorf("%s: decision %+v does not say what was done", c.action, d)
		}
		if (c.wantErr == "") != (d.Error == "") || !strings.Contains(d.Error, c.wantErr) {
			t.Errorf("%s: error %q, want %q", c.action, d.Error, c.wantErr)
		}
		if !bytes.Equal(ctl.Bytes(), c.wantBytes) {
			t.Errorf("%s: the control pipe got %v, want %v", c.action, ctl.Bytes(), c.wantBytes)
		}
		if st := g.state(); st.Protected != c.protected {
			t.Errorf("%s: %d protected, want %d", c.action, st.Protected, c.protected)
		}
	}
	st := g.state()
	if st.Policy != "tpf" || st.Decisions[string(policy.Protect)] != 3 || st.Decisions[string(policy.Release)] != 2 || st.Decisions[string(policy.Freeze)] != 1 {
		t.Errorf("state %+v: want tpf with 3 protects, 2 releases and 1 freeze counted (failed ones too)", st)
	}

	// At the run's end a held protection is released, and none is left.
	ctl.Reset()
	g.act(ctx, policy.Action{Kind: policy.Protect, Consumer: 0}, now)
	ctl.Reset()
	g.releaseAll()
	if !bytes.Equal(ctl.Bytes(), []byte{byte(consumer.ControlUnlock)}) || g.state().Protected != 0 {
		t.Errorf("release at the end: the pipe got %v, %d still protected", ctl.Bytes(), g.state().Protected)
	}
	g.detach(0)
	if g.set[0].pidfd != -1 || g.set[0].ctl != nil {
		t.Error("detach left the consumer's pidfd or control pipe")
	}
}

// A consumer whose region would leave the others under an eighth of the
// limit is refused protection: locked pages cannot be reclaimed.
func TestProtectionRefusedPastTheHeadroom(t *testing.T) {
	spec := run.Resolved{Policy: "tpf", SizeBytes: 90 << 20, MemoryLimitBytes: 100 << 20}
	g, err := newLevers(execConfig{ID: "t", Spec: spec, Unified: &cgroup.Parent{}, Logger: slog.New(slog.DiscardHandler)}, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	var ctl bytes.Buffer
	g.set[0].ctl = &ctl
	d, _ := g.act(context.Background(), policy.Action{Kind: policy.Protect, Consumer: 0}, time.Now)
	if !strings.Contains(d.Error, "refused") || ctl.Len() != 0 || g.state().Protected != 0 {
		t.Errorf("a 90 MiB consumer in 100 MiB: %q, pipe %v; want it refused and nothing asked", d.Error, ctl.Bytes())
	}
}

// A consumer that said its work is over is exiting, and a freeze then
// would hold it, and the run with it, for good (a binpack run hung with
// its last consumer frozen after its done message). Whatever order a
// freeze and the consumer's end come in, it is left thawed, and a freeze
// after the end is refused.
func TestAFinishedConsumerIsNeverLeftFrozen(t *testing.T) {
	root := testenv.UnifiedGroup(t, "finished", true)
	ch, err := root.Child(run.ConsumerName(0))
	if err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	if err := ch.Add(sleeper.Process.Pid); err != nil {
		t.Fatal(err)
	}
	spec := run.Resolved{Policy: "binpack", SizeBytes: 10 << 20, MemoryLimitBytes: 100 << 20}
	fresh := func() *levers {
		g := &levers{name: "binpack", spec: spec, logger: slog.New(slog.DiscardHandler),
			set: []lever{{group: ch, pidfd: -1}}, counts: map[policy.Kind]uint64{}}
		return g
	}
	ctx := context.Background()
	freeze := policy.Action{Kind: policy.Freeze, Consumer: 0}

	g := fresh()
	if d, _ := g.act(ctx, freeze, time.Now); d.Error != "" {
		t.Fatalf("freezing: %s", d.Error)
	}
	g.finished(0)
	if frozen, err := ch.Frozen(); err != nil || frozen || g.state().Frozen != 0 {
		t.Errorf("frozen, then finished: the kernel says frozen %v (%v), the levers %d frozen; want thawed", frozen, err, g.state().Frozen)
	}
	if d, recorded := g.act(ctx, freeze, time.Now); recorded {
		t.Errorf("a freeze after the end: decision %+v recorded, want it left out", d)
	}
	if frozen, _ := ch.Frozen(); frozen {
		t.Error("a freeze after the end froze it")
	}

	// The two at once, many times: the order is the scheduler's.
	for i := range 200 {
		g := fresh()
		done := make(chan struct{})
		var d run.Decision
		var recorded bool
		go func() { d, recorded = g.act(ctx, freeze, time.Now); close(done) }()
		g.finished(0)
		<-done
		if recorded && d.Error != "" {
			t.Fatalf("try %d: the freeze, raced by the end, was recorded failed: %s", i, d.Error)
		}
		if frozen, err := ch.Frozen(); err != nil || frozen {
			t.Fatalf("try %d: a freeze and the end at once left it frozen %v (%v)", i, frozen, err)
		}
	}
}

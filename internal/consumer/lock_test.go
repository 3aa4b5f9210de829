package consumer

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A lock request on the control pipe locks the region as it faults in
// (VmFlags lo and lf: VM_LOCKED with VM_LOCKONFAULT, the kernel's own
// word), and an unlock request clears both; each is answered.
func TestControlLocksAndUnlocksTheRegion(t *testing.T) {
	cfg := cyclesConfig(4*testMiB, 100, 10*time.Millisecond, time.Now().Add(time.Minute))
	r := startConsume(t, cfg, true)
	region := r.next(t, KindRegion, 10*time.Second)
	if region.B != cfg.Size {
		t.Fatalf("region %v: want %d bytes", region, cfg.Size)
	}
	addr := fmt.Sprintf("%#x", region.A)
	flags := func() string { return " " + vmFlags(t, "self", addr) + " " }
	if f := flags(); strings.Contains(f, " lo ") {
		t.Fatalf("the region is locked before any request: VmFlags %q", f)
	}
	for _, step := range []struct {
		b      byte
		locked bool
	}{{ControlLock, true}, {ControlUnlock, false}, {ControlLock, true}} {
		if _, err := r.ctl.Write([]byte{step.b}); err != nil {
			t.Fatal(err)
		}
		ack := r.next(t, KindLocked, 10*time.Second)
		if (ack.A == 1) != step.locked || ack.B != 0 {
			t.Fatalf("after %q: %v, want locked=%v and no errno", step.b, ack, step.locked)
		}
		f := flags()
		if got := strings.Contains(f, " lo ") && strings.Contains(f, " lf "); got != step.locked {
			t.Errorf("after %q: VmFlags %q, want lo and lf %v", step.b, f, step.locked)
		}
	}
	r.cancel()
	if _, err := r.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

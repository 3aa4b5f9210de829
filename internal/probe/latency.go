package probe

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
)

// latencyHooks are the fault-entry tracepoints behind fault_latency. They
// run on every page fault, minor ones included, where the rest of the probes
// run only on major faults and stalls; so they are attached only while the
// host takes major faults, and a host that does not thrash pays nothing for
// them. The first major faults after a calm spell, up to one sample
// interval's worth, go untimed. Load leaves them detached.
type latencyHooks struct {
	calm      time.Duration
	links     []link.Link
	lastMajor time.Time
	perfCount uint64
	// unloaded: a program the hooks need did not load; they are not tried
	// again.
	unloaded bool
}

func (h *latencyHooks) armed() bool { return len(h.links) > 0 }

func (h *latencyHooks) detach() error {
	var errs []error
	for _, l := range h.links {
		errs = append(errs, l.Close())
	}
	h.links = nil
	return errors.Join(errs...)
}

// armLatency attaches the fault-entry hooks and tells major_fault to time.
func (p *Probe) armLatency(now time.Time) readout.Status {
	// Optional: the exceptions tracepoints are x86 only, and the other
	// probes stand without a latency histogram.
	st := readout.Status{Name: readout.FaultLatency, Required: false, Detail: "raw_tp/page_fault_user, raw_tp/page_fault_kernel while major faults occur"}
	if st.Err = errors.Join(p.loaded("major_fault", p.objs.MajorFault), p.loaded("fault_entry_user", p.objs.FaultEntryUser),
		p.loaded("fault_entry_kernel", p.objs.FaultEntryKernel)); st.Err != nil {
		p.latency.unloaded = true
		return st // timing lives in major_fault too
	}
	for _, tp := range []struct {
		name string
		prog *ebpf.Program
	}{{"page_fault_user", p.objs.FaultEntryUser}, {"page_fault_kernel", p.objs.FaultEntryKernel}} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp.name, Program: tp.prog})
		if err != nil {
			st.Err = errors.Join(fmt.Errorf("attaching raw tracepoint %s: %w", tp.name, err), p.latency.detach())
			return st
		}
		p.latency.links = append(p.latency.links, l)
	}
	if err := p.objs.LatencyArmed.Set(uint32(1)); err != nil {
		st.Err = errors.Join(fmt.Errorf("arming latency: %w", err), p.latency.detach())
		return st
	}
	p.latency.lastMajor = now
	st.Attached = true
	return st
}

// disarmLatency stops timing, then detaches the hooks.
func (p *Probe) disarmLatency() error {
	if err := p.objs.LatencyArmed.Set(uint32(0)); err != nil {
		return fmt.Errorf("disarming latency: %w", err)
	}
	return p.latency.detach()
}

// updateLatency arms the hooks when major faults occurred since the last
// call, and disarms them after the calm period without any. It reports
// whether there were major faults.
func (p *Probe) updateLatency(now time.Time, perfCount uint64) bool {
	h := &p.latency
	majors := perfCount > h.perfCount
	h.perfCount = perfCount
	switch {
	case majors && !h.armed() && !h.unloaded:
		st := p.armLatency(now)
		p.setStatus(st)
		if st.Err != nil {
			p.logger.Error("fault-entry hooks failed to attach", "err", st.Err)
		}
	case majors:
		h.lastMajor = now
	case h.armed() && h.calm > 0 && now.Sub(h.lastMajor) >= h.calm:
		if err := p.disarmLatency(); err != nil {
			p.logger.Error("fault-entry hooks failed to detach", "err", err)
		}
	}
	return majors
}

// LatencyArmed reports whether major faults are being timed right now.
func (p *Probe) LatencyArmed() bool { return p.latency.armed() }

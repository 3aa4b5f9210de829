// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

// fault_latency: the start of each fault, read back by major_faults for the ones
// that turn out major, and the histogram slot of a service time.
// Included into thrashscope.bpf.c, after maps.bpf.h.

#ifndef __THRASHSCOPE_FAULT_LATENCY_BPF_H
#define __THRASHSCOPE_FAULT_LATENCY_BPF_H

static __always_inline __u32 log2_slot(__u64 v)
{
	__u32 r = 0, shift;

	shift = (v > 0xFFFFFFFF) << 5;
	v >>= shift;
	r |= shift;
	shift = (v > 0xFFFF) << 4;
	v >>= shift;
	r |= shift;
	shift = (v > 0xFF) << 3;
	v >>= shift;
	r |= shift;
	shift = (v > 0xF) << 2;
	v >>= shift;
	r |= shift;
	shift = (v > 0x3) << 1;
	v >>= shift;
	r |= shift;
	r |= (v >> 1);
	return r; // 0 to 63: the caller bounds it to its array
}

// Fault entry. Stamps the start of every user-mode fault; only the ones that
// turn out major are read back, in major_fault (major_faults.bpf.h). Kernel-mode faults on
// user addresses (copy_to_user into swapped-out memory) enter through
// page_fault_kernel and can be major too.
static __always_inline int stamp_fault(__u64 addr, bool portable)
{
	// The portable way keys the thread by its id: no task pointer needed.
	struct task_struct *task = portable ? NULL : bpf_get_current_task_btf();
	struct fault_task *ft = current_fault_task(task, portable, true);

	if (!ft)
		return 0;
	ft->start_addr = addr;
	ft->start_ns = bpf_ktime_get_ns();
	return 0;
}

static __always_inline int fault_entry_body(struct bpf_raw_tracepoint_args *ctx, bool portable)
{
	return stamp_fault(ctx->args[0], portable);
}

BOTH_WAYS("raw_tp/page_fault_user", fault_entry_user, struct bpf_raw_tracepoint_args,
	  fault_entry_body)
BOTH_WAYS("raw_tp/page_fault_kernel", fault_entry_kernel, struct bpf_raw_tracepoint_args,
	  fault_entry_body)

#endif // __THRASHSCOPE_FAULT_LATENCY_BPF_H

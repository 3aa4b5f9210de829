// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

// process_exit: an exited process leaves the maps.
// Included into thrashscope.bpf.c, after maps.bpf.h.

#ifndef __THRASHSCOPE_PROCESS_EXIT_BPF_H
#define __THRASHSCOPE_PROCESS_EXIT_BPF_H

// sched_process_exit(task, ...): task is current. Drop the thread's stall
// state, and the process's counters once its last thread is gone, so the
// maps hold live processes only and a reused pid starts from zero.
static __always_inline int process_exit_body(struct bpf_raw_tracepoint_args *ctx, bool portable)
{
	struct task_struct *task = current_task(portable);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid, tgid = pid_tgid >> 32, key = 0;
	struct stall_thread *st;
	__s64 *stalled;

	st = bpf_map_lookup_elem(&stall_threads, &tid);
	if (st) {
		if (st->off_since) {
			stalled = bpf_map_lookup_elem(&stalled_threads, &key);
			if (stalled)
				__sync_fetch_and_add(stalled, -1);
		}
		bpf_map_delete_elem(&stall_threads, &tid);
	}
	if (portable)
		bpf_map_delete_elem(&fault_threads, &tid);
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	bpf_map_delete_elem(&process_major_faults, &tgid);
	bpf_map_delete_elem(&process_memory_stall, &tgid);
	return 0;
}

BOTH_WAYS("raw_tp/sched_process_exit", process_exit, struct bpf_raw_tracepoint_args,
	  process_exit_body)

#endif // __THRASHSCOPE_PROCESS_EXIT_BPF_H

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

// process_exit: an exited process leaves the maps.
// Included into thrashscope.bpf.c, after maps.bpf.h.

#ifndef __THRASHSCOPE_PROCESS_EXIT_BPF_H
#define __THRASHSCOPE_PROCESS_EXIT_BPF_H

// sched_process_exit(task, ...): task is current. Drop the thread's stall
// state, and the process's counters once its last thread is gone, so the
// maps hold live processes only and a reused pid starts from zero.
SEC("raw_tp/sched_process_exit")
int process_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 tid = task->pid, tgid = task->tgid, key = 0;
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
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	bpf_map_delete_elem(&process_major_faults, &tgid);
	bpf_map_delete_elem(&process_memory_stall, &tgid);
	return 0;
}

#endif // __THRASHSCOPE_PROCESS_EXIT_BPF_H

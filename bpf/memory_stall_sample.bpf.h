// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

// memory_stall_sample: the rest of the stall on CPU, sampled.
// Included into thrashscope.bpf.c, after maps.bpf.h.

#ifndef __THRASHSCOPE_MEMORY_STALL_SAMPLE_BPF_H
#define __THRASHSCOPE_MEMORY_STALL_SAMPLE_BPF_H

// CPU-clock sample on each CPU, while stalls occur (internal/probe enables
// the events then). current is the task the timer interrupted.
static __always_inline int memory_stall_sample_body(struct bpf_perf_event_data *ctx, bool portable)
{
	struct task_struct *task = current_task(portable);
	struct cgroup_stats *cs;
	struct stall_time *ms;
	struct stall_thread *st;
	__u32 tid;

	if (!TASK_IN_MEMSTALL(portable, task))
		return 0;
	tid = KREAD(portable, task, pid);
	st = bpf_map_lookup_elem(&stall_threads, &tid);
	if (st && st->in_reclaim)
		return 0; // timed exactly
	ms = stall_of(KREAD(portable, task, tgid));
	if (ms)
		__sync_fetch_and_add(&ms->sampled_ns, ctx->sample_period);
	cs = current_cgroup_stats(task, portable);
	if (cs)
		__sync_fetch_and_add(&cs->stall.sampled_ns, ctx->sample_period);
	return 0;
}

BOTH_WAYS("perf_event", memory_stall_sample, struct bpf_perf_event_data, memory_stall_sample_body)

#endif // __THRASHSCOPE_MEMORY_STALL_SAMPLE_BPF_H

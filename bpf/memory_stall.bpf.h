// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

// memory_stall: per-process memory-stall time, exactly off CPU and in reclaim.
// Included into thrashscope.bpf.c, after maps.bpf.h.

#ifndef __THRASHSCOPE_MEMORY_STALL_BPF_H
#define __THRASHSCOPE_MEMORY_STALL_BPF_H

// Memory stall as PSI counts it: the whole time a thread has in_memstall
// set, which psi_memstall_enter/leave bracket (reclaim, compaction, a read
// of a page evicted from the working set, memcg throttling), on CPU and off.
// Those two functions have no tracepoint, so the time is put together from
// three parts, kept apart in struct stall_time:
//  - off CPU, exact: sched_switch sees the bit as a thread leaves and comes
//    back (only the thread itself flips it, and only while running);
//  - reclaim on CPU, exact: direct and memcg reclaim are bracketed by vmscan
//    tracepoints inside their stall, and are most of a thrash's on-CPU
//    stall; their stretches are cut at each switch out;
//  - the rest on CPU, sampled: a CPU-clock event every sample period on
//    each CPU adds one period to a thread it finds stalled outside a
//    reclaim window. The count of samples is close to Poisson, so over T of
//    such stall the standard error is about sqrt(T * period): 10 ms over
//    100 ms at a 1 ms period, 32 ms over 1 s.

static __always_inline int reclaim_begin(struct bpf_raw_tracepoint_args *ctx, bool portable)
{
	struct task_struct *task = current_task(portable);
	struct stall_thread zero = {}, *st;
	__u32 tid;

	// Reclaim outside a stall (a write to memory.max or memory.reclaim)
	// is not one; PSI does not count it either.
	if (!TASK_IN_MEMSTALL(portable, task))
		return 0;
	tid = (__u32)bpf_get_current_pid_tgid();
	st = counter_for(&stall_threads, tid, &zero);
	if (!st) {
		count_lost(PROBE_MEMORY_STALL);
		return 0;
	}
	st->in_reclaim = 1;
	st->reclaim_since = bpf_ktime_get_ns();
	count_one(&memory_stalls_seen);
	return 0;
}

static __always_inline int reclaim_end(struct bpf_raw_tracepoint_args *ctx, bool portable)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct cgroup_stats *cs;
	struct stall_time *ms;
	struct stall_thread *st;
	__u64 now;

	st = bpf_map_lookup_elem(&stall_threads, &tid);
	if (!st || !st->in_reclaim)
		return 0;
	now = bpf_ktime_get_ns();
	if (st->reclaim_since && now > st->reclaim_since) {
		ms = stall_of(pid_tgid >> 32);
		if (ms)
			__sync_fetch_and_add(&ms->reclaim_ns, now - st->reclaim_since);
		cs = current_cgroup_stats(portable ? NULL : bpf_get_current_task_btf(), portable);
		if (cs)
			__sync_fetch_and_add(&cs->stall.reclaim_ns, now - st->reclaim_since);
	}
	st->in_reclaim = 0;
	st->reclaim_since = 0;
	if (st->off_since == 0) // running: nothing left to keep
		bpf_map_delete_elem(&stall_threads, &tid);
	return 0;
}

BOTH_WAYS("raw_tp/mm_vmscan_direct_reclaim_begin", reclaim_begin_direct,
	  struct bpf_raw_tracepoint_args, reclaim_begin)
BOTH_WAYS("raw_tp/mm_vmscan_direct_reclaim_end", reclaim_end_direct, struct bpf_raw_tracepoint_args,
	  reclaim_end)
BOTH_WAYS("raw_tp/mm_vmscan_memcg_reclaim_begin", reclaim_begin_memcg,
	  struct bpf_raw_tracepoint_args, reclaim_begin)
BOTH_WAYS("raw_tp/mm_vmscan_memcg_reclaim_end", reclaim_end_memcg, struct bpf_raw_tracepoint_args,
	  reclaim_end)

// sched_switch(preempt, prev, next, prev_state); prev is current here.
static __always_inline int memory_stall_body(struct bpf_raw_tracepoint_args *ctx, bool portable)
{
	struct task_struct *prev = current_task(portable);
	struct task_struct *next = (struct task_struct *)ctx->args[2];
	struct stall_thread zero = {}, *st;
	struct cgroup_stats *cs;
	struct stall_time *ms;
	__u64 now = 0;
	__s64 *stalled;
	__u32 tid, key = 0;

	stalled = bpf_map_lookup_elem(&stalled_threads, &key);
	if (!stalled)
		return 0;

	if (TASK_IN_MEMSTALL(portable, prev)) {
		now = bpf_ktime_get_ns();
		tid = KREAD(portable, prev, pid);
		st = counter_for(&stall_threads, tid, &zero);
		if (!st) {
			count_lost(PROBE_MEMORY_STALL);
		} else {
			if (st->reclaim_since && now > st->reclaim_since) {
				ms = stall_of(KREAD(portable, prev, tgid));
				if (ms)
					__sync_fetch_and_add(&ms->reclaim_ns,
							     now - st->reclaim_since);
				cs = current_cgroup_stats(prev, portable);
				if (cs)
					__sync_fetch_and_add(&cs->stall.reclaim_ns,
							     now - st->reclaim_since);
			}
			st->reclaim_since = 0;
			if (st->off_since == 0) {
				__sync_fetch_and_add(stalled, 1);
				wake_sampler(now);
			}
			st->off_since = now;
			st->cgroup = cgroups_on ? current_cgroup_id(prev, portable) : 0;
			count_one(&memory_stalls_seen);
		}
	}

	if (*stalled <= 0 || !BPF_CORE_READ_BITFIELD_PROBED(next, in_memstall))
		return 0;
	tid = BPF_CORE_READ(next, pid);
	st = bpf_map_lookup_elem(&stall_threads, &tid);
	if (!st || st->off_since == 0)
		return 0; // switched out before we attached
	if (!now)
		now = bpf_ktime_get_ns();
	if (now > st->off_since) {
		ms = stall_of(BPF_CORE_READ(next, tgid));
		if (ms)
			__sync_fetch_and_add(&ms->off_cpu_ns, now - st->off_since);
		cs = st->cgroup ? cgroup_stats_for_event(st->cgroup) : NULL;
		if (cs)
			__sync_fetch_and_add(&cs->stall.off_cpu_ns, now - st->off_since);
	}
	st->off_since = 0;
	__sync_fetch_and_add(stalled, -1);
	if (st->in_reclaim)
		st->reclaim_since = now; // back to reclaiming on CPU
	else
		bpf_map_delete_elem(&stall_threads, &tid);
	return 0;
}

BOTH_WAYS("raw_tp/sched_switch", memory_stall, struct bpf_raw_tracepoint_args, memory_stall_body)

#endif // __THRASHSCOPE_MEMORY_STALL_BPF_H

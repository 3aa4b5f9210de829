//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

// thrashscope's kernel side: per-process major faults (classed anon or file),
// per-process memory-stall time, and a major-fault service-time histogram.
//
// Everything here hangs off tracepoints and perf software events, which work
// on every kernel thrashscope targets; no kprobe, fentry or tp_btf.
//
// Map names match the metrics they feed (thrashscope_<map name>...), so a
// reader can go from a dashboard panel to this file with one search.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define EEXIST 17 // errno values are ABI; vmlinux.h does not carry them

// Live processes (and stalled threads) the maps can hold. A full map refuses
// the insert and the event is counted in probe_events_lost; unlike an LRU map
// it never evicts a live process's counts silently. Exit cleanup below keeps
// the maps to live processes only.
#define MAX_PROCESSES 16384
#define MAX_STALLED_THREADS 16384

// log2 buckets of nanoseconds: slot i holds [2^i, 2^(i+1)) ns, up to ~18 min.
#define LATENCY_SLOTS 40

enum fault_kind {
	FAULT_ANON = 0, // no backing file: a swap-in (or a zero page read back)
	FAULT_FILE = 1, // file-backed VMA, including shmem/tmpfs
	FAULT_UNKNOWN = 2, // the VMA could not be looked up (mmap lock busy)
	FAULT_KINDS = 3,
};

// Index of probe_events_lost; mirrors the probe names in internal/probe.
enum probe_id {
	PROBE_MAJOR_FAULTS = 0,
	PROBE_MEMORY_STALL = 1,
	PROBE_FAULT_LATENCY = 2,
	PROBE_PROCESS_EXIT = 3,
	PROBES = 4,
};

struct major_faults {
	__u64 count[FAULT_KINDS];
};

struct latency_hist {
	__u64 slots[LATENCY_SLOTS];
	__u64 sum_ns;
};

// A fault's start. Stamped into a per-CPU slot on every fault, which is as
// cheap as a store; moved into the task's local storage only when the task
// switches out, so a fault that sleeps and wakes on another CPU still finds
// its own start. A slot is only ever written by the task running on its CPU
// and emptied when that task switches out, so an open slot always belongs to
// the current task.
struct fault_start {
	__u64 ns;
	__u64 addr;
	__u32 tid;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PROCESSES);
	__type(key, __u32); // tgid
	__type(value, struct major_faults);
} process_major_faults SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PROCESSES);
	__type(key, __u32); // tgid
	__type(value, __u64); // ns off CPU while in a memory stall
} process_memory_stall SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_STALLED_THREADS);
	__type(key, __u32); // tid
	__type(value, __u64); // ktime when it switched out in a memory stall
} memory_stall_start SEC(".maps");

// How many entries memory_stall_start holds. While it is zero, no thread is
// off CPU in a stall and sched_switch need not read the incoming task.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __s64);
} stalled_threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FAULT_KINDS);
	__type(key, __u32);
	__type(value, struct latency_hist);
} major_fault_latency SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fault_start);
} fault_slot SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct fault_start);
} fault_starts SEC(".maps");

// Every major-fault event the program saw, to reconcile against the perf
// event's own count: the difference is events the kernel did not hand us.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} major_faults_seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PROBES);
	__type(key, __u32);
	__type(value, __u64);
} probe_events_lost SEC(".maps");

// Set by internal/probe while the fault-entry hooks are attached: they are
// attached only while the host takes major faults, so that a host that does
// not thrash pays nothing per minor fault. While clear, major_fault skips the
// service time instead of counting a missing start as lost.
volatile __u32 latency_armed = 0;

static __always_inline void count_lost(__u32 probe)
{
	__u64 *n = bpf_map_lookup_elem(&probe_events_lost, &probe);
	if (n)
		*n += 1;
}

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
	return r < LATENCY_SLOTS ? r : LATENCY_SLOTS - 1;
}

// Find-or-insert for a per-tgid counter map. Returns NULL when the map is
// full; the caller counts the event as lost.
static __always_inline void *counter_for(void *map, __u32 tgid, void *zero)
{
	void *v = bpf_map_lookup_elem(map, &tgid);
	if (v)
		return v;
	bpf_map_update_elem(map, &tgid, zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, &tgid);
}

// Fault entry. Stamps the start of every user-mode fault; only the ones that
// turn out major are read back, in major_fault below. Kernel-mode faults on
// user addresses (copy_to_user into swapped-out memory) enter through
// page_fault_kernel and can be major too.
static __always_inline int stamp_fault(__u64 addr)
{
	__u32 key = 0;
	struct fault_start *slot = bpf_map_lookup_elem(&fault_slot, &key);

	if (!slot)
		return 0;
	slot->tid = (__u32)bpf_get_current_pid_tgid();
	slot->addr = addr;
	slot->ns = bpf_ktime_get_ns();
	return 0;
}

SEC("raw_tp/page_fault_user")
int fault_entry_user(struct bpf_raw_tracepoint_args *ctx)
{
	return stamp_fault(ctx->args[0]);
}

SEC("raw_tp/page_fault_kernel")
int fault_entry_kernel(struct bpf_raw_tracepoint_args *ctx)
{
	return stamp_fault(ctx->args[0]);
}

static long classify_vma(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	__u32 *kind = data;

	*kind = vma->vm_file ? FAULT_FILE : FAULT_ANON;
	return 0;
}

// PERF_COUNT_SW_PAGE_FAULTS_MAJ, sample period 1. The kernel raises it from
// mm_account_fault(), after handle_mm_fault() returned the final (not
// retried) result, in the faulting task's context: the same place that
// increments maj_flt in /proc/<pid>/stat. Faults taken on behalf of another
// task through GUP raise no perf event and are the one thing it misses.
SEC("perf_event")
int major_fault(struct bpf_perf_event_data *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct task_struct *task = bpf_get_current_task_btf();
	struct major_faults zero = {}, *mf;
	struct fault_start *fs;
	struct latency_hist *hist;
	__u32 kind = FAULT_UNKNOWN, key = 0;
	__u64 addr = ctx->addr, *seen;

	seen = bpf_map_lookup_elem(&major_faults_seen, &key);
	if (seen)
		*seen += 1;

	bpf_find_vma(task, addr, classify_vma, &kind, 0);

	mf = counter_for(&process_major_faults, tgid, &zero);
	// Constant offsets: the verifier cannot bound a kind the callback wrote.
	if (!mf)
		count_lost(PROBE_MAJOR_FAULTS);
	else if (kind == FAULT_ANON)
		__sync_fetch_and_add(&mf->count[FAULT_ANON], 1);
	else if (kind == FAULT_FILE)
		__sync_fetch_and_add(&mf->count[FAULT_FILE], 1);
	else
		__sync_fetch_and_add(&mf->count[FAULT_UNKNOWN], 1);
	if (kind != FAULT_ANON && kind != FAULT_FILE)
		kind = FAULT_UNKNOWN;

	if (!latency_armed)
		return 0;

	// Service time: fault entry to accounting. It covers the whole fault,
	// including lock waits, reclaim in the fault path, the I/O and any
	// VM_FAULT_RETRY round; it excludes the return to user space.
	fs = bpf_map_lookup_elem(&fault_slot, &key);
	if (!fs || fs->ns == 0 || fs->tid != (__u32)bpf_get_current_pid_tgid())
		fs = bpf_task_storage_get(&fault_starts, task, 0, 0); // it slept
	if (!fs || fs->ns == 0 || fs->addr != addr || now < fs->ns) {
		count_lost(PROBE_FAULT_LATENCY);
		return 0;
	}
	hist = bpf_map_lookup_elem(&major_fault_latency, &kind);
	if (hist) {
		__u64 delta = now - fs->ns;
		__u32 slot = log2_slot(delta);

		if (slot < LATENCY_SLOTS)
			hist->slots[slot] += 1;
		hist->sum_ns += delta;
	}
	fs->ns = 0;
	return 0;
}

// sched_switch(preempt, prev, next, prev_state); prev is current here.
// A thread that switches out with in_memstall set is waiting on memory
// (reclaim, a refault read, throttling); its off-CPU time until it switches
// back in is its share of the PSI memory stall. Only the task itself flips
// in_memstall, and only while running, so next still carries the bit it had
// when it switched out: the map is touched only for stalled threads.
SEC("raw_tp/sched_switch")
int memory_stall(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *prev = bpf_get_current_task_btf();
	struct task_struct *next = (struct task_struct *)ctx->args[2];
	struct fault_start *slot, *fs;
	__u64 now, *start, *total, zero = 0;
	__s64 *stalled;
	__u32 tid, tgid, key = 0;
	long err;

	// prev leaves this CPU: carry its open fault start with it.
	slot = bpf_map_lookup_elem(&fault_slot, &key);
	if (slot && slot->ns) {
		fs = bpf_task_storage_get(&fault_starts, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (fs) {
			fs->ns = slot->ns;
			fs->addr = slot->addr;
		}
		slot->ns = 0;
	}

	stalled = bpf_map_lookup_elem(&stalled_threads, &key);
	if (!stalled)
		return 0;

	if (BPF_CORE_READ_BITFIELD(prev, in_memstall)) {
		now = bpf_ktime_get_ns();
		tid = prev->pid;
		err = bpf_map_update_elem(&memory_stall_start, &tid, &now, BPF_NOEXIST);
		if (err == 0)
			__sync_fetch_and_add(stalled, 1);
		else if (err != -EEXIST ||
			 bpf_map_update_elem(&memory_stall_start, &tid, &now, BPF_EXIST))
			count_lost(PROBE_MEMORY_STALL);
	}

	if (*stalled <= 0 || !BPF_CORE_READ_BITFIELD_PROBED(next, in_memstall))
		return 0;
	tid = BPF_CORE_READ(next, pid);
	start = bpf_map_lookup_elem(&memory_stall_start, &tid);
	if (!start)
		return 0; // switched out before we attached
	now = bpf_ktime_get_ns();
	tgid = BPF_CORE_READ(next, tgid);
	total = counter_for(&process_memory_stall, tgid, &zero);
	if (total && now > *start)
		__sync_fetch_and_add(total, now - *start);
	else if (!total)
		count_lost(PROBE_MEMORY_STALL);
	if (bpf_map_delete_elem(&memory_stall_start, &tid) == 0)
		__sync_fetch_and_add(stalled, -1);
	return 0;
}

// sched_process_exit(task, ...): task is current. Drop the thread's stall
// start, and the process's counters once its last thread is gone, so the
// maps hold live processes only and a reused pid starts from zero.
SEC("raw_tp/sched_process_exit")
int process_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 tid = task->pid, tgid = task->tgid, key = 0;
	__s64 *stalled;

	if (bpf_map_delete_elem(&memory_stall_start, &tid) == 0) {
		stalled = bpf_map_lookup_elem(&stalled_threads, &key);
		if (stalled)
			__sync_fetch_and_add(stalled, -1);
	}
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	bpf_map_delete_elem(&process_major_faults, &tgid);
	bpf_map_delete_elem(&process_memory_stall, &tgid);
	return 0;
}

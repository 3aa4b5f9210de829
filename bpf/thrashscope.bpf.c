//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

// thrashscope's kernel side: per-process major faults (classed anon, shmem or
// file), per-process memory-stall time as PSI counts it, and a major-fault
// service-time histogram.
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
#define TMPFS_MAGIC 0x01021994 // shmem, tmpfs, MAP_SHARED|MAP_ANONYMOUS, SysV shm
#define VM_SHARED 0x00000008 // include/linux/mm.h; macros are not in BTF

// Live processes (and stalled threads) the maps can hold. A full map refuses
// the insert and the event is counted in probe_events_lost; unlike an LRU map
// it never evicts a live process's counts silently. Exit cleanup below keeps
// the maps to live processes only.
#define MAX_PROCESSES 16384
#define MAX_STALLED_THREADS 16384

// Mappings whose class is remembered, one per process and 16 MiB of address
// space: a thrashing process faults over a few large mappings, so a handful
// of entries serve all its faults. LRU: a forgotten mapping is looked up again.
#define MAX_MAPPINGS 16384
#define MAPPING_REGION_SHIFT 24

// log2 buckets of nanoseconds: slot i holds [2^i, 2^(i+1)) ns, up to ~18 min.
#define LATENCY_SLOTS 40

enum fault_kind {
	FAULT_ANON = 0, // private anonymous memory read back from swap
	FAULT_SHMEM = 1, // shared anonymous memory or tmpfs read back from swap
	FAULT_FILE = 2, // a page-cache miss on a real file
	FAULT_UNKNOWN = 3, // the mapping could not be looked up (mmap lock busy)
	FAULT_KINDS = 4,
};

// What a mapping is, as far as the kind of its faults goes.
enum mapping_class {
	MAPPING_ANON = 0, // no file: private anonymous memory
	MAPPING_SHMEM = 1, // a tmpfs/shmem file, shared or private
	MAPPING_FILE_SHARED = 2,
	MAPPING_FILE_PRIVATE = 3, // its written pages are anonymous copies
};

// Index of probe_events_lost; mirrors the probe names in internal/probe.
enum probe_id {
	PROBE_MAJOR_FAULTS = 0,
	PROBE_MEMORY_STALL = 1,
	PROBE_MEMORY_STALL_SAMPLE = 2,
	PROBE_FAULT_LATENCY = 3,
	PROBE_PROCESS_EXIT = 4,
	PROBES = 5,
};

// The enums above, named in BTF so that bpf2go generates them for Go.
const enum fault_kind *unused_fault_kind __attribute__((unused));
const enum probe_id *unused_probe_id __attribute__((unused));

struct major_faults {
	__u64 count[FAULT_KINDS];
};

// A process's memory-stall time, in the three parts it is measured in. The
// sum is what PSI's memory "some" counts for a group holding only it.
struct stall_time {
	// Exact: off CPU with in_memstall set, from switch-out to switch-in
	// (waiting on a refault read, throttled, or runnable but preempted).
	__u64 off_cpu_ns;
	// Exact: on CPU inside direct or memcg reclaim entered in a stall,
	// between the vmscan begin/end tracepoints, less time off CPU.
	__u64 reclaim_ns;
	// Sampled: on CPU in a stall outside reclaim (submitting a refault read,
	// decompressing from zram or zswap, compaction), one sampling period per
	// CPU-clock sample that finds the thread so; see memory_stall_sample.
	__u64 sampled_ns;
};

struct latency_hist {
	__u64 slots[LATENCY_SLOTS];
	__u64 sum_ns;
};

// What a thread's fault in progress needs to be timed and classed, in the
// thread's own storage: a fault that sleeps and wakes on another CPU still
// finds it, and nothing has to carry it across a switch.
struct fault_task {
	__u64 start_ns; // fault entry, while the latency hooks are attached; 0 once used
	__u64 start_addr;
	// The thread's fault count (maj_flt + min_flt) plus one when its fault
	// last went through filemap_fault: the count that fault will have once
	// accounted, so a match says the fault accounted now read page cache.
	__u64 filemap_seq;
};

// A thread's stall bookkeeping, kept only while it is stalled off CPU or
// inside a reclaim window.
struct stall_thread {
	__u64 off_since; // ktime it switched out stalled; 0 while on CPU
	__u64 reclaim_since; // start of its current on-CPU stretch of reclaim; 0 if none
	__u32 in_reclaim; // between reclaim begin and end, on CPU or off
	__u32 pad;
};

// The class of the mapping that held an address, and what validates it: the
// same mm, and no change to the address space since. From Linux 6.4 that is
// mm_lock_seq, which moves on every mmap write lock (any mmap, munmap, mremap
// or mprotect takes one). Before, it is the address space's shape: its
// mapping count and its total, data, exec and stack sizes, one of which
// moves on nearly every change; a mapping replaced by one of another class
// at the same place and of the same size and kind of size is the one change
// it misses.
struct mapping_key {
	__u32 tgid;
	__u32 pad;
	__u64 region;
};

struct mapping {
	__u64 mm;
	__u64 start;
	__u64 end;
	__u64 seq;
	__u32 class;
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
	__type(value, struct stall_time);
} process_memory_stall SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_STALLED_THREADS);
	__type(key, __u32); // tid
	__type(value, struct stall_thread);
} stall_threads SEC(".maps");

// How many threads are off CPU in a stall. While it is zero, sched_switch
// need not read the incoming task.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __s64);
} stalled_threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_MAPPINGS);
	__type(key, struct mapping_key);
	__type(value, struct mapping);
} mappings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct fault_task);
} fault_tasks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FAULT_KINDS);
	__type(key, __u32);
	__type(value, struct latency_hist);
} major_fault_latency SEC(".maps");

// Every major-fault event the program saw, to reconcile against the perf
// event's own count: the difference is events the kernel did not hand us.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} major_faults_seen SEC(".maps");

// Stalls begun: a switch out with in_memstall set, or a reclaim window
// opened in one. internal/probe enables the CPU-clock samples while it grows.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} memory_stalls_seen SEC(".maps");

// Mapping lookups the cache could not answer: each is a bpf_find_vma.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} mapping_lookups SEC(".maps");

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

// Set by internal/probe once filemap_fault is attached. Without it (kernels
// before 6.10 lack mm_filemap_fault) a fault in a private file mapping is
// called file, as most are, though a written page read back from swap is
// anon.
volatile __u32 filemap_hooked = 0;

// Kernels before 6.13 keep mm_lock_seq as an int; later ones as a seqcount.
struct mm_struct___seqcount {
	seqcount_t mm_lock_seq;
} __attribute__((preserve_access_index));

struct mm_struct___int {
	int mm_lock_seq;
} __attribute__((preserve_access_index));

static __always_inline void count_lost(__u32 probe)
{
	__u64 *n = bpf_map_lookup_elem(&probe_events_lost, &probe);
	if (n)
		*n += 1;
}

static __always_inline void count_one(void *map)
{
	__u32 key = 0;
	__u64 *n = bpf_map_lookup_elem(map, &key);
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
	return r; // 0 to 63: the caller bounds it to its array
}

// Find-or-insert for a per-key map. Returns NULL when the map is full; the
// caller counts the event as lost.
static __always_inline void *counter_for(void *map, __u32 key, void *zero)
{
	void *v = bpf_map_lookup_elem(map, &key);
	if (v)
		return v;
	bpf_map_update_elem(map, &key, zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, &key);
}

static __always_inline struct stall_time *stall_of(__u32 tgid)
{
	struct stall_time zero = {};
	struct stall_time *ms = counter_for(&process_memory_stall, tgid, &zero);

	if (!ms)
		count_lost(PROBE_MEMORY_STALL);
	return ms;
}

static __always_inline __u64 fault_count(struct task_struct *task)
{
	return task->maj_flt + task->min_flt;
}

static __always_inline struct fault_task *fault_task_of(struct task_struct *task)
{
	return bpf_task_storage_get(&fault_tasks, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
}

// Fault entry. Stamps the start of every user-mode fault; only the ones that
// turn out major are read back, in major_fault below. Kernel-mode faults on
// user addresses (copy_to_user into swapped-out memory) enter through
// page_fault_kernel and can be major too.
static __always_inline int stamp_fault(__u64 addr)
{
	struct fault_task *ft = fault_task_of(bpf_get_current_task_btf());

	if (!ft)
		return 0;
	ft->start_addr = addr;
	ft->start_ns = bpf_ktime_get_ns();
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

// filemap_fault(), the page-cache fault handler of real filesystems, fires
// this on its way in; shmem and tmpfs have their own handler, and a swap-in
// of anonymous memory goes through do_swap_page. It runs only on faults that
// reach a file's page cache, not on every fault.
SEC("raw_tp/mm_filemap_fault")
int filemap_fault(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct fault_task *ft = fault_task_of(task);

	if (ft)
		ft->filemap_seq = fault_count(task) + 1;
	return 0;
}

static long classify_vma(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct mapping *m = data;
	struct file *file = vma->vm_file;

	m->start = vma->vm_start;
	m->end = vma->vm_end;
	if (!file)
		m->class = MAPPING_ANON;
	else if (file->f_inode->i_sb->s_magic == TMPFS_MAGIC)
		m->class = MAPPING_SHMEM;
	else if (vma->vm_flags & VM_SHARED)
		m->class = MAPPING_FILE_SHARED;
	else
		m->class = MAPPING_FILE_PRIVATE;
	return 0;
}

// mm_seq is what tells that the address space changed (see struct mapping);
// odd while a writer is mid-change. mm is the current task's, reached
// through a BTF pointer: plain loads.
static __always_inline __u64 mm_seq(struct mm_struct *mm)
{
	if (bpf_core_field_exists(((struct mm_struct___seqcount *)0)->mm_lock_seq))
		return ((struct mm_struct___seqcount *)mm)->mm_lock_seq.sequence;
	if (bpf_core_field_exists(((struct mm_struct___int *)0)->mm_lock_seq))
		return (__u32)((struct mm_struct___int *)mm)->mm_lock_seq;
	// No per-VMA locks: the shape, always even.
	return ((__u64)mm->map_count << 48 ^ (__u64)mm->total_vm << 24 ^ (__u64)mm->data_vm << 8 ^
		(__u64)mm->exec_vm << 32 ^ (__u64)mm->stack_vm) &
	       ~1ULL;
}

// mapping_class finds the class of the mapping holding addr: from the cache
// when the address space has not changed since it was looked up, else with
// bpf_find_vma. In this perf-event context bpf_find_vma defers its mmap
// unlock to an irq_work, a self-interrupt (a VM exit on a virtual machine)
// that costs 6-8 µs: it runs once per mapping and address-space change, not
// per fault. Returns -1 when the mapping cannot be looked up.
static __always_inline int mapping_class(struct task_struct *task, __u32 tgid, __u64 addr)
{
	struct mm_struct *mm = task->mm;
	struct mapping_key key = {.tgid = tgid, .region = addr >> MAPPING_REGION_SHIFT};
	struct mapping m = {}, *cached;
	__u64 seq;

	if (!mm)
		return -1;
	seq = mm_seq(mm);
	cached = bpf_map_lookup_elem(&mappings, &key);
	if (cached && cached->mm == (__u64)mm && cached->seq == seq && cached->start <= addr &&
	    addr < cached->end)
		return cached->class;
	count_one(&mapping_lookups);
	if (bpf_find_vma(task, addr, classify_vma, &m, 0) != 0)
		return -1;
	// An odd seqcount is a writer mid-change: the answer holds for this
	// fault, whose own mapping is locked, but not for the next.
	if (!(seq & 1)) {
		m.mm = (__u64)mm;
		m.seq = seq;
		bpf_map_update_elem(&mappings, &key, &m, BPF_ANY);
	}
	return m.class;
}

// PERF_COUNT_SW_PAGE_FAULTS_MAJ, sample period 1. The kernel raises it from
// mm_account_fault(), after handle_mm_fault() returned the final (not
// retried) result and maj_flt was incremented, in the faulting task's
// context: the same place that counts maj_flt in /proc/<pid>/stat. Faults
// taken on behalf of another task through GUP raise no perf event and are
// the one thing it misses.
//
// The kind: a fault that went through filemap_fault (its fault count then,
// plus this one, is the thread's count now) read a file's page cache. Any
// other major fault read swap-backed memory back, and the mapping says
// which: anonymous (a private file mapping's written pages are anonymous
// copies too) or shmem.
SEC("perf_event")
int major_fault(struct bpf_perf_event_data *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct task_struct *task = bpf_get_current_task_btf();
	struct major_faults zero = {}, *mf;
	struct fault_task *ft;
	struct latency_hist *hist;
	__u32 kind = FAULT_UNKNOWN;
	__u64 addr = ctx->addr;
	int class;

	count_one(&major_faults_seen);

	ft = bpf_task_storage_get(&fault_tasks, task, 0, 0);
	if (ft && ft->filemap_seq == fault_count(task)) {
		kind = FAULT_FILE;
	} else {
		class = mapping_class(task, tgid, addr);
		if (class == MAPPING_ANON || (class == MAPPING_FILE_PRIVATE && filemap_hooked))
			kind = FAULT_ANON;
		else if (class == MAPPING_SHMEM)
			kind = FAULT_SHMEM;
		else if (class == MAPPING_FILE_SHARED || class == MAPPING_FILE_PRIVATE)
			kind = FAULT_FILE; // a filesystem with its own fault handler
	}

	mf = counter_for(&process_major_faults, tgid, &zero);
	// Constant offsets: the verifier cannot bound a computed index.
	if (!mf)
		count_lost(PROBE_MAJOR_FAULTS);
	else if (kind == FAULT_ANON)
		__sync_fetch_and_add(&mf->count[FAULT_ANON], 1);
	else if (kind == FAULT_SHMEM)
		__sync_fetch_and_add(&mf->count[FAULT_SHMEM], 1);
	else if (kind == FAULT_FILE)
		__sync_fetch_and_add(&mf->count[FAULT_FILE], 1);
	else
		__sync_fetch_and_add(&mf->count[FAULT_UNKNOWN], 1);

	if (!latency_armed)
		return 0;

	// Service time: fault entry to accounting. It covers the whole fault,
	// including lock waits, reclaim in the fault path, the I/O and any
	// VM_FAULT_RETRY round; it excludes the return to user space.
	if (!ft || ft->start_ns == 0 || ft->start_addr != addr || now < ft->start_ns) {
		count_lost(PROBE_FAULT_LATENCY);
		return 0;
	}
	hist = bpf_map_lookup_elem(&major_fault_latency, &kind);
	if (hist) {
		__u64 delta = now - ft->start_ns;
		__u64 slot = log2_slot(delta);

		// The bound must be tested on the register that indexes: the
		// verifier of 6.1 does not carry it over from a copy, which the
		// compiler makes of a clamp it folds ("R2 unbounded memory
		// access"). The barrier keeps the test as written.
		barrier_var(slot);
		if (slot >= LATENCY_SLOTS)
			slot = LATENCY_SLOTS - 1;
		barrier_var(slot);
		if (slot < LATENCY_SLOTS)
			hist->slots[slot] += 1;
		hist->sum_ns += delta;
	}
	ft->start_ns = 0;
	return 0;
}

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

static __always_inline void reclaim_begin(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct stall_thread zero = {}, *st;
	__u32 tid;

	// Reclaim outside a stall (a write to memory.max or memory.reclaim)
	// is not one; PSI does not count it either.
	if (!BPF_CORE_READ_BITFIELD(task, in_memstall))
		return;
	tid = task->pid;
	st = counter_for(&stall_threads, tid, &zero);
	if (!st) {
		count_lost(PROBE_MEMORY_STALL);
		return;
	}
	st->in_reclaim = 1;
	st->reclaim_since = bpf_ktime_get_ns();
	count_one(&memory_stalls_seen);
}

static __always_inline void reclaim_end(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct stall_time *ms;
	struct stall_thread *st;
	__u32 tid = task->pid;
	__u64 now;

	st = bpf_map_lookup_elem(&stall_threads, &tid);
	if (!st || !st->in_reclaim)
		return;
	now = bpf_ktime_get_ns();
	if (st->reclaim_since && now > st->reclaim_since) {
		ms = stall_of(task->tgid);
		if (ms)
			__sync_fetch_and_add(&ms->reclaim_ns, now - st->reclaim_since);
	}
	st->in_reclaim = 0;
	st->reclaim_since = 0;
	if (st->off_since == 0) // running: nothing left to keep
		bpf_map_delete_elem(&stall_threads, &tid);
}

SEC("raw_tp/mm_vmscan_direct_reclaim_begin")
int reclaim_begin_direct(struct bpf_raw_tracepoint_args *ctx)
{
	reclaim_begin();
	return 0;
}

SEC("raw_tp/mm_vmscan_direct_reclaim_end")
int reclaim_end_direct(struct bpf_raw_tracepoint_args *ctx)
{
	reclaim_end();
	return 0;
}

SEC("raw_tp/mm_vmscan_memcg_reclaim_begin")
int reclaim_begin_memcg(struct bpf_raw_tracepoint_args *ctx)
{
	reclaim_begin();
	return 0;
}

SEC("raw_tp/mm_vmscan_memcg_reclaim_end")
int reclaim_end_memcg(struct bpf_raw_tracepoint_args *ctx)
{
	reclaim_end();
	return 0;
}

// CPU-clock sample on each CPU, while stalls occur (internal/probe enables
// the events then). current is the task the timer interrupted.
SEC("perf_event")
int memory_stall_sample(struct bpf_perf_event_data *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct stall_time *ms;
	struct stall_thread *st;
	__u32 tid;

	if (!BPF_CORE_READ_BITFIELD(task, in_memstall))
		return 0;
	tid = task->pid;
	st = bpf_map_lookup_elem(&stall_threads, &tid);
	if (st && st->in_reclaim)
		return 0; // timed exactly
	ms = stall_of(task->tgid);
	if (ms)
		__sync_fetch_and_add(&ms->sampled_ns, ctx->sample_period);
	return 0;
}

// sched_switch(preempt, prev, next, prev_state); prev is current here.
SEC("raw_tp/sched_switch")
int memory_stall(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *prev = bpf_get_current_task_btf();
	struct task_struct *next = (struct task_struct *)ctx->args[2];
	struct stall_thread zero = {}, *st;
	struct stall_time *ms;
	__u64 now = 0;
	__s64 *stalled;
	__u32 tid, key = 0;

	stalled = bpf_map_lookup_elem(&stalled_threads, &key);
	if (!stalled)
		return 0;

	if (BPF_CORE_READ_BITFIELD(prev, in_memstall)) {
		now = bpf_ktime_get_ns();
		tid = prev->pid;
		st = counter_for(&stall_threads, tid, &zero);
		if (!st) {
			count_lost(PROBE_MEMORY_STALL);
		} else {
			if (st->reclaim_since && now > st->reclaim_since) {
				ms = stall_of(prev->tgid);
				if (ms)
					__sync_fetch_and_add(&ms->reclaim_ns,
							     now - st->reclaim_since);
			}
			st->reclaim_since = 0;
			if (st->off_since == 0)
				__sync_fetch_and_add(stalled, 1);
			st->off_since = now;
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
	}
	st->off_since = 0;
	__sync_fetch_and_add(stalled, -1);
	if (st->in_reclaim)
		st->reclaim_since = now; // back to reclaiming on CPU
	else
		bpf_map_delete_elem(&stall_threads, &tid);
	return 0;
}

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

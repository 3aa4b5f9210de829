// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

// The types, maps, switches and helpers the probes share.
// Included into thrashscope.bpf.c, after maps.bpf.h.

#ifndef __THRASHSCOPE_MAPS_BPF_H
#define __THRASHSCOPE_MAPS_BPF_H

#define EEXIST 17 // errno values are ABI; vmlinux.h does not carry them
#define TMPFS_MAGIC 0x01021994 // shmem, tmpfs, MAP_SHARED|MAP_ANONYMOUS, SysV shm
#define VM_SHARED 0x00000008 // include/linux/mm.h; macros are not in BTF

// Live processes (and stalled threads) the maps can hold. A full map refuses
// the insert and the event is counted in probe_events_lost; unlike an LRU map
// it never evicts a live process's counts silently. Exit cleanup (process_exit) keeps
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

// Cgroups whose faults and stalls are counted at once: every cgroup a
// faulting or stalling task runs in, until internal/probe sees it removed
// and drops it. A full map refuses the new cgroup, and the event is counted
// in cgroup_events_lost. Preallocated (perf_event programs use it, and
// kernels before 6.1 give them no other): about 0.8 MiB.
#define MAX_CGROUPS 2048

// A major fault's per-cgroup counts are kept on its CPU first, in one of a
// few slots per CPU chosen by the cgroup's id: a fault there costs no hash
// lookup. A cgroup keeps its slot while it faults; another cgroup of the
// same slot counts in cgroups directly meanwhile, and takes the slot once
// the holder has not faulted for CGROUP_SLOT_HOLD_NS, adding the holder's
// counts into cgroups then. internal/probe reads the slots with the map,
// so nothing waits unseen.
#define CGROUP_PENDING_SLOTS 16 // a power of two
#define CGROUP_SLOT_HOLD_NS 1000000000ULL

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
	// The service time of the timed ones (see major_fault_latency): the
	// part of the process's time its major faults took, stalled or not.
	__u64 service_ns;
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

// A cgroup's counters: its tasks' major faults by kind, their memory-stall
// time, and the service time of their major faults (all kinds together).
// Keyed by the cgroup's id in the cgroup v2 hierarchy (its directory's
// inode number there), which a task has on a hybrid host too.
struct cgroup_stats {
	__u64 faults[FAULT_KINDS];
	struct stall_time stall;
	struct latency_hist latency;
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
	// The cgroup v2 id it switched out in: its time off CPU counts there,
	// read from current then rather than from the incoming task, which
	// only probe reads could reach.
	__u64 cgroup;
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
	__uint(max_entries, MAX_CGROUPS);
	__type(key, __u64); // cgroup v2 id
	__type(value, struct cgroup_stats);
} cgroups SEC(".maps");

// A CPU's fault counts for one cgroup, not yet in cgroups.
struct cgroup_pending {
	__u64 id; // the cgroup v2 id; 0 while the slot is empty
	// Odd while the slot is being added into cgroups: internal/probe
	// reads the slots before and after the map, and a slot whose seq moved
	// or is odd is read again.
	__u64 seq;
	__u64 last_ns; // the holder's last fault
	__u64 faults[FAULT_KINDS];
	struct latency_hist latency;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CGROUP_PENDING_SLOTS);
	__type(key, __u32);
	__type(value, struct cgroup_pending);
} cgroups_pending SEC(".maps");

// A zeroed value to insert from: a struct cgroup_stats is too large for the
// BPF stack beside a program's own variables. Never written.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cgroup_stats);
} cgroups_zero SEC(".maps");

// Events the full cgroups map could not count.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cgroup_events_lost SEC(".maps");

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

// A thread's fault in progress: in the thread's own storage on the fast
// way; on the portable way (no task storage before 5.11) in a hash keyed
// by its id, made at its first fault and dropped when it exits. A full
// hash leaves a thread's faults unclassed by filemap_fault and untimed
// (counted in probe_events_lost).
#define MAX_FAULT_THREADS 32768

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct fault_task);
} fault_tasks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_FAULT_THREADS);
	__type(key, __u32); // tid
	__type(value, struct fault_task);
} fault_threads SEC(".maps");

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

// Mapping lookups the cache could not answer: each a bpf_find_vma, or a
// walk of the mappings' index on the portable way.
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

// Set by internal/probe unless per-cgroup accounting is off
// (--cgroup.top-k=0): while clear, no program touches cgroups.
volatile __u32 cgroups_on = 0;

// Wakes for the observer's sampler: records written when memory trouble
// (major faults, threads switching out stalled) begins on a CPU after a
// quiet second, at most every wake_gap_ns through that first second, so
// that a thrash that begins between two samples is judged at once. Trouble
// is WAKE_BUSY_EVENTS or more in a WAKE_BUCKET_NS bucket (100 a second),
// so a fault now and then is not; a host at rest writes nothing, and
// neither does one in trouble all the time: its trouble never begins. Each
// CPU keeps its own buckets, so no line passes between CPUs per event. 0
// turns it off.
#define WAKE_QUIET_NS 1000000000ULL
#define WAKE_BUCKET_NS 100000000ULL
#define WAKE_BUSY_EVENTS 10
volatile __u64 wake_gap_ns = 0;
__u64 last_wake_ns = 0;

struct wake_cpu {
	__u64 bucket_start;
	__u64 events; // in the bucket
	__u64 busy_last; // the last event of a busy bucket
	__u64 busy_since; // the first, after a quiet second
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wake_cpu);
} wake_cpus SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} wakes SEC(".maps");

// wake_sampler counts an event at now on this CPU, and writes a wake within
// the first second of trouble unless one went out within wake_gap_ns (two
// CPUs may both write one: the reader merges them).
static __always_inline void wake_sampler(__u64 now)
{
	__u64 gap = wake_gap_ns;
	struct wake_cpu *w;
	__u32 key = 0;

	if (!gap)
		return;
	w = bpf_map_lookup_elem(&wake_cpus, &key);
	if (!w)
		return;
	if (now - w->bucket_start >= WAKE_BUCKET_NS) {
		w->bucket_start = now;
		w->events = 0;
	}
	if (++w->events < WAKE_BUSY_EVENTS)
		return;
	if (now - w->busy_last >= WAKE_QUIET_NS)
		w->busy_since = now;
	w->busy_last = now;
	if (now - w->busy_since >= WAKE_QUIET_NS || now - last_wake_ns < gap)
		return;
	last_wake_ns = now;
	bpf_ringbuf_output(&wakes, &now, sizeof(now), 0);
}

// Kernels before 6.13 keep mm_lock_seq as an int; later ones as a seqcount.
struct mm_struct___seqcount {
	seqcount_t mm_lock_seq;
} __attribute__((preserve_access_index));

struct mm_struct___int {
	int mm_lock_seq;
} __attribute__((preserve_access_index));

// Two ways to reach the kernel, each program built in both from one body
// (BOTH_WAYS); internal/probe loads one of them under the programs' own
// names, the fast way where the kernel offers what it needs:
//  - fast (Linux 5.17+): the current task through BTF pointers (plain
//    loads), a thread's fault in task storage, a mapping found with
//    bpf_find_vma;
//  - portable (Linux 5.8+): the task read with bpf_probe_read_kernel, the
//    cgroup with bpf_get_current_cgroup_id, a thread's fault in a hash
//    keyed by its id, a mapping found by walking the address space's own
//    index (the maple tree, or the red-black tree before 6.1).
// The way is a constant of each body, so the compiler keeps one branch
// only: a portable program calls no helper a 5.10 kernel lacks.
#define BOTH_WAYS(sec, name, ctx_t, body)                                                          \
	SEC(sec) int name(ctx_t *ctx)                                                              \
	{                                                                                          \
		return body(ctx, false);                                                           \
	}                                                                                          \
	SEC(sec) int name##_portable(ctx_t *ctx)                                                   \
	{                                                                                          \
		return body(ctx, true);                                                            \
	}

static __always_inline struct task_struct *current_task(bool portable)
{
	return portable ? (struct task_struct *)bpf_get_current_task() : bpf_get_current_task_btf();
}

// A field of a kernel object: a plain load through a BTF pointer (fast), or
// a probe read (portable).
#define KREAD(portable, task, field) ((portable) ? BPF_CORE_READ(task, field) : (task)->field)
#define TASK_IN_MEMSTALL(portable, task)                                                           \
	((portable) ? BPF_CORE_READ_BITFIELD_PROBED(task, in_memstall)                             \
		    : BPF_CORE_READ_BITFIELD(task, in_memstall))

static __always_inline void count_lost(__u32 probe)
{
	__u64 *n = bpf_map_lookup_elem(&probe_events_lost, &probe);
	if (n)
		*n += 1;
}

static __always_inline void count_n(void *map, __u64 n)
{
	__u32 key = 0;
	__u64 *c = bpf_map_lookup_elem(map, &key);
	if (c)
		*c += n;
}

static __always_inline void count_one(void *map)
{
	count_n(map, 1);
}

// add_to adds n to a counter: atomically in a map every CPU writes, plainly
// in this CPU's own slot, which no other writer touches (programs do not
// nest on a CPU), and a locked add costs a fault a few more ns.
static __always_inline void add_to(bool shared, __u64 *c, __u64 n)
{
	if (shared)
		__sync_fetch_and_add(c, n);
	else
		*c += n;
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

// The counters of the cgroup with v2 id id, made on its first event; NULL
// when the map is full (the caller counts what it loses).
static __always_inline struct cgroup_stats *cgroup_stats_of(__u64 id)
{
	struct cgroup_stats *cs;
	__u32 key = 0;
	void *zero;

	cs = bpf_map_lookup_elem(&cgroups, &id);
	if (cs)
		return cs;
	zero = bpf_map_lookup_elem(&cgroups_zero, &key);
	if (!zero)
		return NULL;
	bpf_map_update_elem(&cgroups, &id, zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&cgroups, &id);
}

// The counters of the cgroup with v2 id id for one event; NULL while
// per-cgroup accounting is off, or when the map is full (counted).
static __always_inline struct cgroup_stats *cgroup_stats_for_event(__u64 id)
{
	struct cgroup_stats *cs;

	if (!cgroups_on)
		return NULL;
	cs = cgroup_stats_of(id);
	if (!cs)
		count_one(&cgroup_events_lost);
	return cs;
}

// The cgroup v2 id of the current task: plain loads through BTF pointers,
// which cost no helper call, or the helper that reads the same.
static __always_inline __u64 current_cgroup_id(struct task_struct *task, bool portable)
{
	return portable ? bpf_get_current_cgroup_id() : task->cgroups->dfl_cgrp->kn->id;
}

// The cgroup of the current task, in the v2 hierarchy.
static __always_inline struct cgroup_stats *current_cgroup_stats(struct task_struct *task,
								 bool portable)
{
	return cgroups_on ? cgroup_stats_for_event(current_cgroup_id(task, portable)) : NULL;
}

// add_pending adds a slot's counts into its cgroup's and empties it, seq
// odd meanwhile. A full map loses the slot's faults (counted).
static __always_inline void add_pending(struct cgroup_pending *p)
{
	struct cgroup_stats *cs;
	__u64 n;
	int i;

	__sync_fetch_and_add(&p->seq, 1);
	cs = cgroup_stats_of(p->id);
	if (cs) {
		for (i = 0; i < FAULT_KINDS; i++)
			if (p->faults[i])
				__sync_fetch_and_add(&cs->faults[i], p->faults[i]);
		for (i = 0; i < LATENCY_SLOTS; i++)
			if (p->latency.slots[i])
				__sync_fetch_and_add(&cs->latency.slots[i], p->latency.slots[i]);
		if (p->latency.sum_ns)
			__sync_fetch_and_add(&cs->latency.sum_ns, p->latency.sum_ns);
	} else {
		n = p->faults[FAULT_ANON] + p->faults[FAULT_SHMEM] + p->faults[FAULT_FILE] +
		    p->faults[FAULT_UNKNOWN];
		count_n(&cgroup_events_lost, n);
	}
	for (i = 0; i < FAULT_KINDS; i++)
		p->faults[i] = 0;
	for (i = 0; i < LATENCY_SLOTS; i++)
		p->latency.slots[i] = 0;
	p->latency.sum_ns = 0;
	p->id = 0;
	__sync_fetch_and_add(&p->seq, 1);
}

// The slot on this CPU of the cgroup with v2 id id, taken from a holder
// that has not faulted since now - CGROUP_SLOT_HOLD_NS; NULL while another
// cgroup holds it.
static __always_inline struct cgroup_pending *cgroup_pending_of(__u64 id, __u64 now)
{
	__u32 slot = id & (CGROUP_PENDING_SLOTS - 1);
	struct cgroup_pending *p = bpf_map_lookup_elem(&cgroups_pending, &slot);

	if (!p)
		return NULL;
	if (p->id != id) {
		if (p->id && now - p->last_ns < CGROUP_SLOT_HOLD_NS)
			return NULL;
		if (p->id)
			add_pending(p);
		p->id = id;
		// Its entry in cgroups, made now while it holds the slot: a
		// cgroup counts there whenever another holds its slot, and one
		// that has an entry keeps counting when the map is full.
		cgroup_stats_of(id);
	}
	p->last_ns = now;
	return p;
}

static __always_inline __u64 fault_count(struct task_struct *task, bool portable)
{
	unsigned long flt[2] = {};

	if (!portable)
		return task->maj_flt + task->min_flt;
	// min_flt and maj_flt sit side by side in every kernel: one read.
	if (bpf_core_field_offset(task->maj_flt) ==
	    bpf_core_field_offset(task->min_flt) + sizeof(flt[0])) {
		bpf_core_read(flt, sizeof(flt), &task->min_flt);
		return flt[0] + flt[1];
	}
	return BPF_CORE_READ(task, maj_flt) + BPF_CORE_READ(task, min_flt);
}

// The current thread's fault in progress, made if create; NULL when the
// portable way's hash is full (counted) or not made.
static __always_inline struct fault_task *current_fault_task(struct task_struct *task,
							     bool portable, bool create)
{
	struct fault_task zero = {}, *ft;
	__u32 tid;

	if (!portable)
		return bpf_task_storage_get(&fault_tasks, task, 0,
					    create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	tid = (__u32)bpf_get_current_pid_tgid();
	ft = bpf_map_lookup_elem(&fault_threads, &tid);
	if (ft || !create)
		return ft;
	bpf_map_update_elem(&fault_threads, &tid, &zero, BPF_NOEXIST);
	ft = bpf_map_lookup_elem(&fault_threads, &tid);
	if (!ft)
		count_lost(PROBE_FAULT_LATENCY);
	return ft;
}

#endif // __THRASHSCOPE_MAPS_BPF_H

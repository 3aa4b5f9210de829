// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

// major_faults: each major fault per process, classed anon, shmem or file, and its
// service time.
// Included into thrashscope.bpf.c, after maps.bpf.h.

#ifndef __THRASHSCOPE_MAJOR_FAULTS_BPF_H
#define __THRASHSCOPE_MAJOR_FAULTS_BPF_H

// filemap_fault(), the page-cache fault handler of real filesystems, fires
// this on its way in; shmem and tmpfs have their own handler, and a swap-in
// of anonymous memory goes through do_swap_page. It runs only on faults that
// reach a file's page cache, not on every fault.
static __always_inline int filemap_fault_body(struct bpf_raw_tracepoint_args *ctx, bool portable)
{
	struct task_struct *task = current_task(portable);
	struct fault_task *ft = current_fault_task(task, portable, true);

	if (ft)
		ft->filemap_seq = fault_count(task, portable) + 1;
	return 0;
}

BOTH_WAYS("raw_tp/mm_filemap_fault", filemap_fault, struct bpf_raw_tracepoint_args,
	  filemap_fault_body)

static __always_inline __u32 class_of(struct file *file, __u64 magic, __u64 flags)
{
	if (!file)
		return MAPPING_ANON;
	if (magic == TMPFS_MAGIC)
		return MAPPING_SHMEM;
	if (flags & VM_SHARED)
		return MAPPING_FILE_SHARED;
	return MAPPING_FILE_PRIVATE;
}

// bpf_find_vma's callback, with the mmap lock held: plain loads.
static long classify_vma(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct mapping *m = data;
	struct file *file = vma->vm_file;

	m->start = vma->vm_start;
	m->end = vma->vm_end;
	m->class = class_of(file, file ? file->f_inode->i_sb->s_magic : 0, vma->vm_flags);
	return 0;
}

// The same from the portable way's walk: probe reads. vm_flags is const in
// newer kernels' BTF, so it is read into a variable of its own.
static __always_inline void classify_walked(struct vm_area_struct *vma, struct mapping *m)
{
	struct file *file = BPF_CORE_READ(vma, vm_file);
	unsigned long flags = 0;

	bpf_core_read(&flags, sizeof(flags), &vma->vm_flags);
	m->start = BPF_CORE_READ(vma, vm_start);
	m->end = BPF_CORE_READ(vma, vm_end);
	m->class = class_of(file, file ? BPF_CORE_READ(file, f_inode, i_sb, s_magic) : 0, flags);
}

// mm_seq is what tells that the address space changed (see struct mapping);
// odd while a writer is mid-change. mm is the current task's, reached
// through a BTF pointer: plain loads.
static __always_inline __u64 mm_seq(struct mm_struct *mm, bool portable)
{
	struct mm_struct___seqcount *mseq = (void *)mm;
	struct mm_struct___int *mint = (void *)mm;

	if (bpf_core_field_exists(mseq->mm_lock_seq))
		return portable ? BPF_CORE_READ(mseq, mm_lock_seq.sequence)
				: mseq->mm_lock_seq.sequence;
	if (bpf_core_field_exists(mint->mm_lock_seq))
		return (__u32)(portable ? BPF_CORE_READ(mint, mm_lock_seq) : mint->mm_lock_seq);
	// No per-VMA locks: the shape, always even.
	return ((__u64)KREAD(portable, mm, map_count) << 48 ^
		(__u64)KREAD(portable, mm, total_vm) << 24 ^
		(__u64)KREAD(portable, mm, data_vm) << 8 ^
		(__u64)KREAD(portable, mm, exec_vm) << 32 ^ (__u64)KREAD(portable, mm, stack_vm)) &
	       ~1ULL;
}

// mapping_class finds the class of the mapping holding addr: from the cache
// when the address space has not changed since it was looked up, else with
// bpf_find_vma (the fast way) or a walk of the mappings' index (portable).
// In this perf-event context bpf_find_vma defers its mmap unlock to an
// irq_work, a self-interrupt (a VM exit on a virtual machine): it runs once
// per mapping and address-space change, not per fault. Returns -1 when the
// mapping cannot be looked up.
static __always_inline int mapping_class(struct task_struct *task, __u32 tgid, __u64 addr,
					 bool portable)
{
	struct mm_struct *mm = KREAD(portable, task, mm);
	struct vm_area_struct *vma;
	struct mapping_key key = {.tgid = tgid, .region = addr >> MAPPING_REGION_SHIFT};
	struct mapping m = {}, *cached;
	__u64 seq;

	if (!mm)
		return -1;
	seq = mm_seq(mm, portable);
	cached = bpf_map_lookup_elem(&mappings, &key);
	if (cached && cached->mm == (__u64)mm && cached->seq == seq && cached->start <= addr &&
	    addr < cached->end)
		return cached->class;
	count_one(&mapping_lookups);
	if (portable) {
		vma = walk_vma(mm, addr);
		if (!vma)
			return -1;
		classify_walked(vma, &m);
	} else if (bpf_find_vma(task, addr, classify_vma, &m, 0) != 0) {
		return -1;
	}
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
static __always_inline int major_fault_body(struct bpf_perf_event_data *ctx, bool portable)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct task_struct *task = current_task(portable);
	struct major_faults zero = {}, *mf;
	struct cgroup_pending *cp;
	struct cgroup_stats *cs;
	struct latency_hist *cg_hist = NULL;
	__u64 *cg_faults = NULL;
	bool cg_shared = false; // cg_faults in cgroups, not this CPU's slot
	__u64 cgid;
	struct fault_task *ft;
	struct latency_hist *hist;
	__u32 kind = FAULT_UNKNOWN;
	__u64 addr = ctx->addr;
	int class;

	count_one(&major_faults_seen);
	wake_sampler(now);

	ft = current_fault_task(task, portable, false);
	if (ft && ft->filemap_seq == fault_count(task, portable)) {
		kind = FAULT_FILE;
	} else {
		class = mapping_class(task, tgid, addr, portable);
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

	// The cgroup's slot on this CPU, or its entry in cgroups while
	// another cgroup holds the slot.
	if (cgroups_on) {
		cgid = current_cgroup_id(task, portable);
		cp = cgroup_pending_of(cgid, now);
		if (cp) {
			cg_faults = cp->faults;
			cg_hist = &cp->latency;
		} else {
			cs = cgroup_stats_for_event(cgid);
			if (cs) {
				cg_faults = cs->faults;
				cg_hist = &cs->latency;
				cg_shared = true;
			}
		}
	}
	if (!cg_faults)
		; // off, or counted lost
	else if (kind == FAULT_ANON)
		add_to(cg_shared, &cg_faults[FAULT_ANON], 1);
	else if (kind == FAULT_SHMEM)
		add_to(cg_shared, &cg_faults[FAULT_SHMEM], 1);
	else if (kind == FAULT_FILE)
		add_to(cg_shared, &cg_faults[FAULT_FILE], 1);
	else
		add_to(cg_shared, &cg_faults[FAULT_UNKNOWN], 1);

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
		if (mf)
			__sync_fetch_and_add(&mf->service_ns, delta);
		if (cg_hist) {
			barrier_var(slot);
			if (slot < LATENCY_SLOTS)
				add_to(cg_shared, &cg_hist->slots[slot], 1);
			add_to(cg_shared, &cg_hist->sum_ns, delta);
		}
	}
	ft->start_ns = 0;
	return 0;
}

BOTH_WAYS("perf_event", major_fault, struct bpf_perf_event_data, major_fault_body)

#endif // __THRASHSCOPE_MAJOR_FAULTS_BPF_H

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

// cgroup_rmdir: a removed cgroup leaves the cgroups map at once, so that a
// churn of short-lived cgroups cannot hold the map full until the reader's
// sweep; its last counts go to the reader through a queue.
// Included into thrashscope.bpf.c, after maps.bpf.h.

#ifndef __THRASHSCOPE_CGROUP_RMDIR_BPF_H
#define __THRASHSCOPE_CGROUP_RMDIR_BPF_H

// How many removed cgroups' last counts wait for the reader: it drains the
// queue at each sample.
#define MAX_REMOVED_CGROUPS 4096

struct removed_cgroup {
	__u64 id;
	struct cgroup_stats stats;
};

struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, MAX_REMOVED_CGROUPS);
	__type(value, struct removed_cgroup);
} removed_cgroups SEC(".maps");

// Where one is made before it is queued: too large for the stack.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct removed_cgroup);
} removed_scratch SEC(".maps");

// Removed cgroups whose last counts the full queue could not take.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} removed_cgroups_lost SEC(".maps");

// cgroup_rmdir(cgrp, path). Only the cgroup2 hierarchy's ids key the map
// (hierarchy 0, as /proc/<pid>/cgroup shows it): a v1 group's id is of its
// own hierarchy, and may be any v2 group's too.
SEC("raw_tp/cgroup_rmdir")
int cgroup_rmdir(struct bpf_raw_tracepoint_args *ctx)
{
	struct cgroup *cgrp = (struct cgroup *)ctx->args[0];
	struct removed_cgroup *r;
	struct cgroup_stats *cs;
	__u32 key = 0;
	__u64 id;

	if (!cgroups_on || BPF_CORE_READ(cgrp, root, hierarchy_id) != 0)
		return 0;
	id = BPF_CORE_READ(cgrp, kn, id);
	cs = bpf_map_lookup_elem(&cgroups, &id);
	if (!cs)
		return 0;
	r = bpf_map_lookup_elem(&removed_scratch, &key);
	if (r) {
		r->id = id;
		__builtin_memcpy(&r->stats, cs, sizeof(r->stats));
		if (bpf_map_push_elem(&removed_cgroups, r, 0))
			count_one(&removed_cgroups_lost);
	}
	bpf_map_delete_elem(&cgroups, &id);
	return 0;
}

#endif // __THRASHSCOPE_CGROUP_RMDIR_BPF_H

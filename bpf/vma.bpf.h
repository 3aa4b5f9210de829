// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

// The mapping that holds a faulting address, found without bpf_find_vma:
// the portable way's walk of the address space's own index.
// Included into thrashscope.bpf.c, after maps.bpf.h.

#ifndef __THRASHSCOPE_VMA_BPF_H
#define __THRASHSCOPE_VMA_BPF_H

// The walk reads the index as find_vma() does, but without the mmap lock,
// which a BPF program cannot take: every read is a probe read, so a node
// freed or changed under it yields a wrong pointer at worst, never a
// fault, and the mapping it ends on is kept only if it holds the address.
// From 6.1 the index is a maple tree, whose readers need only RCU, which
// holds around every BPF program; before, a red-black tree, whose walk can
// lose its way while a writer rebalances it: the fault is then unknown.

// Before 6.1: mm->mm_rb, each mapping linked in by its vm_rb.
struct mm_struct___rb {
	struct rb_root mm_rb;
} __attribute__((preserve_access_index));

struct vm_area_struct___rb {
	struct rb_node vm_rb;
} __attribute__((preserve_access_index));

// A red-black tree of n nodes is at most 2 log2(n + 1) deep: 32 for the
// 65,530 mappings of the default vm.max_map_count.
#define RB_WALK_DEPTH 40

static __always_inline struct vm_area_struct *walk_rbtree(struct mm_struct *mm, __u64 addr)
{
	struct rb_node *node = BPF_CORE_READ((struct mm_struct___rb *)mm, mm_rb.rb_node);
	__u64 link = bpf_core_field_offset(struct vm_area_struct___rb, vm_rb);
	struct vm_area_struct *vma;
	__u64 start, end;
	int i;

	for (i = 0; i < RB_WALK_DEPTH && node; i++) {
		vma = (void *)node - link;
		start = BPF_CORE_READ(vma, vm_start);
		end = BPF_CORE_READ(vma, vm_end);
		if (end > addr) {
			if (start <= addr)
				return vma;
			node = BPF_CORE_READ(node, rb_left);
		} else {
			node = BPF_CORE_READ(node, rb_right);
		}
	}
	return NULL;
}

// From 6.1: mm->mm_mt. include/linux/maple_tree.h; macros are not in BTF.
#define MAPLE_NODE_MASK 255ULL
#define MAPLE_NODE_TYPE_SHIFT 3
#define MAPLE_NODE_TYPE_MASK 0x0F
#define MAPLE_RANGE64_PIVOTS 15
#define MAPLE_ARANGE64_PIVOTS 9
// An address space's tree is 3 or 4 levels deep even at the maximum
// mapping count; deeper means a walk gone wrong.
#define MAPLE_WALK_DEPTH 8

// A copy of the node being walked: one probe read a level. Bytes to the
// map, so that its type need not be generated in Go.
struct maple_node_copy {
	__u8 bytes[sizeof(struct maple_node)];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct maple_node_copy);
} maple_nodes SEC(".maps");

// The root is a node when it is an internal entry (xa_is_node); it is then
// the node's encoded pointer with the internal bit set (mte_safe_root()).
// Below the root, a slot holds the encoded pointer alone: the node's
// address, its type in bits 3-6 and MAPLE_ENODE_NULL.
#define MAPLE_ROOT_NODE 0x02ULL

static __always_inline bool maple_is_node(__u64 entry)
{
	return (entry & 3) == 2 && entry > 4096;
}

// maple_offset is the slot of addr in a node of pivots pivots (a constant):
// the first pivot at or above addr, up to the node's data end, and that
// pivot into *max; the data end when none is, and more than pivots when
// the end is past them (a node read mid-change).
static __always_inline __u32 maple_offset(unsigned long *pivot, __u32 pivots, __u32 end, __u64 addr,
					  __u64 *max)
{
	__u32 offset = end;
	int i;

	if (end > pivots)
		return pivots + 1;
	for (i = 0; i < MAPLE_RANGE64_PIVOTS; i++) {
		if (i >= pivots || i >= end)
			break;
		if (pivot[i] >= addr) {
			offset = i;
			*max = pivot[i];
			break;
		}
	}
	barrier_var(offset);
	return offset;
}

// walk_maple is mtree_lookup_walk() on copies of the nodes: at each level
// the first pivot at or above addr picks the slot, up to the node's data
// end (ma_data_end()); the leaf's slot is the mapping, or NULL for a gap.
static __always_inline struct vm_area_struct *walk_maple(struct mm_struct *mm, __u64 addr)
{
	__u64 entry = (__u64)BPF_CORE_READ(mm, mm_mt.ma_root);
	__u64 max = ~0ULL, node;
	__u32 key = 0, type, end, last, offset;
	struct maple_node *n = (struct maple_node *)bpf_map_lookup_elem(&maple_nodes, &key);
	int level;

	if (!n || !maple_is_node(entry))
		return NULL; // empty, or one entry at index 0
	entry &= ~MAPLE_ROOT_NODE;
	for (level = 0; level < MAPLE_WALK_DEPTH; level++) {
		if (entry < 4096)
			return NULL;
		node = entry & ~MAPLE_NODE_MASK;
		type = (entry >> MAPLE_NODE_TYPE_SHIFT) & MAPLE_NODE_TYPE_MASK;
		if (bpf_probe_read_kernel(n, sizeof(*n), (void *)node))
			return NULL;
		// A dead node's parent is itself: a writer replaced it.
		if (((__u64)n->parent & ~MAPLE_NODE_MASK) == node)
			return NULL;
		if (type == maple_arange_64) {
			end = n->ma64.meta.end;
			offset =
			    maple_offset(n->ma64.pivot, MAPLE_ARANGE64_PIVOTS, end, addr, &max);
			if (offset > MAPLE_ARANGE64_PIVOTS)
				return NULL;
			entry = (__u64)n->ma64.slot[offset];
			continue;
		}
		if (type != maple_range_64 && type != maple_leaf_64)
			return NULL;
		last = n->mr64.pivot[MAPLE_RANGE64_PIVOTS - 1];
		if (!last)
			end = n->mr64.meta.end;
		else if (last == max)
			end = MAPLE_RANGE64_PIVOTS - 1;
		else
			end = MAPLE_RANGE64_PIVOTS;
		offset = maple_offset(n->mr64.pivot, MAPLE_RANGE64_PIVOTS, end, addr, &max);
		barrier_var(offset);
		if (offset > MAPLE_RANGE64_PIVOTS)
			return NULL;
		entry = (__u64)n->mr64.slot[offset];
		if (type == maple_leaf_64)
			return (entry & 3) == 0 && entry > 4096 ? (struct vm_area_struct *)entry
								: NULL;
	}
	return NULL;
}

// walk_vma finds the mapping holding addr in mm by the index this kernel
// has, and checks that it holds addr: a walk that lost its way does not.
static __always_inline struct vm_area_struct *walk_vma(struct mm_struct *mm, __u64 addr)
{
	struct vm_area_struct *vma = NULL;

	if (bpf_core_field_exists(((struct mm_struct___rb *)0)->mm_rb))
		vma = walk_rbtree(mm, addr);
	else if (bpf_core_field_exists(mm->mm_mt))
		vma = walk_maple(mm, addr);
	if (!vma || BPF_CORE_READ(vma, vm_start) > addr || addr >= BPF_CORE_READ(vma, vm_end))
		return NULL;
	return vma;
}

#endif // __THRASHSCOPE_VMA_BPF_H

//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

// thrashscope's kernel side: per-process major faults (classed anon, shmem or
// file), per-process memory-stall time as PSI counts it, and a major-fault
// service-time histogram.
//
// Everything here hangs off tracepoints and perf software events, which work
// on every kernel thrashscope targets; no kprobe, fentry or tp_btf. Each
// program is built two ways (BOTH_WAYS, maps.bpf.h): fast on Linux 5.17+,
// portable down to 5.8.
//
// Map names match the metrics they feed (thrashscope_<map name>...), so a
// reader can go from a dashboard panel to maps.bpf.h with one search.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// The shared types and maps, then one file per probe, named as observer
// --check names it.
#include "maps.bpf.h"
#include "vma.bpf.h"
#include "fault_latency.bpf.h"
#include "major_faults.bpf.h"
#include "memory_stall.bpf.h"
#include "memory_stall_sample.bpf.h"
#include "process_exit.bpf.h"
#include "cgroup_rmdir.bpf.h"

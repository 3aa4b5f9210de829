package probe

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type major_faults -type stall_time -type latency_hist -type cgroup_stats -type cgroup_pending -type fault_kind -type probe_id -type removed_cgroup thrashscope ../../bpf/thrashscope.bpf.c -- -I../../bpf/include

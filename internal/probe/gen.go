package probe

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type major_faults -type latency_hist thrashscope ../../bpf/thrashscope.bpf.c -- -I../../bpf/include

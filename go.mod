module github.com/thrashscope/thrashscope

go 1.26.0

tool github.com/cilium/ebpf/cmd/bpf2go

require (
	github.com/cilium/ebpf v0.22.0
	github.com/prometheus/procfs v0.23.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/mdlayher/socket v0.6.0 // indirect
	golang.org/x/net v0.61.0 // indirect
)

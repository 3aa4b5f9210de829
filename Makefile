# thrashscope: each target is one line; see README.md.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/prometheus/common/version.Version=$(VERSION) -X github.com/prometheus/common/version.Revision=$(shell git rev-parse --short HEAD 2>/dev/null)
GOFILES  = $(shell git ls-files '*.go' | grep -v '_bpfel.go$$')

.PHONY: build run test test-kernels test-deploy generate lint bench soak fuzz vmlinux

build: ## bin/observer, bin/loadgen and bin/thrashtool (reports, comparisons, findings), static (no libc mapped: 1.5 MiB less RSS); the committed BPF objects mean no clang is needed
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/...

run: build ## the observer in the foreground on http://127.0.0.1:9752 (root for BPF)
	bin/observer

test: ## every test; privileged ones skip off root unless THRASHSCOPE_REQUIRE_PRIVILEGED=1
	$(GO) test -count=1 -p 1 -timeout 30m ./...

test-kernels: ## boot each kernel of the matrix (Debian 12's 6.1 and 6.12, Debian 11's 5.10) in qemu, pure cgroup v2 with swap, run the functional tests there and print the table (qemu-system-x86, busybox-static, kmod)
	$(GO) run ./internal/vmtest/matrix --markdown docs/kernels.md --summary README.md

test-deploy: ## prove each deploy kit in a real engine here: the image under Podman, the compose kit under podman-compose (an induced run's alert reaches Alertmanager), the DaemonSet's pod under a kubelet and containerd; installs what it needs, keeps base images and the kubelet in /var/cache/thrashscope-deploy, leaves nothing running (root)
	$(GO) run ./internal/deploytest

generate: ## rebuild the bpf2go objects from bpf/ (needs clang, llvm-strip), the dashboards JSON and the Kubernetes PrometheusRule
	$(GO) generate ./...

lint: ## gofmt, go vet, clang-format
	@test -z "$$(gofmt -l $(GOFILES))" || { gofmt -l $(GOFILES); echo 'run gofmt -w on the files above'; exit 1; }
	$(GO) vet ./...
	clang-format --dry-run --Werror bpf/*.bpf.c bpf/*.bpf.h

bench: build ## what the observer costs the host (and how that grows with major faults a second and with workloads thrashing at once), how fast it detects a thrash (each side by side with a baseline), whether each alert catches every thrash scenario and stays quiet on the benign ones (beside the peers' rules), whether each diagnosis names the binding limit and shortfall and its first remedy ends the thrash, and the docs' policy comparisons run again: their findings must hold (root, swap; hours, for the emulated disk's)
	$(GO) run ./bench/overhead --observer bin/observer
	$(GO) run ./bench/overhead --observer bin/observer --curves faults,workloads
	$(GO) run ./bench/cgroupcost
	$(GO) run ./bench/runcost --observer bin/observer
	$(GO) run ./bench/detection --observer bin/observer
	$(GO) run ./bench/alerts --observer bin/observer
	$(GO) run ./bench/diagnosis --observer bin/observer
	$(GO) run ./bench/comparisons --loadgen bin/loadgen

soak: build ## the observer through a 25-minute e2 run and 5 minutes after: its RSS, heap, goroutines and fds every 10 s, and their slopes (root, swap)
	$(GO) run ./bench/soak --observer bin/observer

FUZZTIME ?= 30s
fuzz: ## each fuzzer (spec and record decoders, procfs and smaps parsers) for FUZZTIME (30s); make test runs their seeds
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "$$f ($$pkg)"; $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

vmlinux: ## regenerate bpf/include/vmlinux.h from this kernel's BTF
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/include/vmlinux.h

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
)

// fakeObserverEnv makes the test binary act as a stand-in observer, so the
// observer plumbing is tested without BPF or root.
const fakeObserverEnv = "THRASHSCOPE_BENCH_FAKE_OBSERVER"

// TestMain lets the test binary also be a workload child (as the real
// binary re-executes itself) and a fake observer.
func TestMain(m *testing.M) {
	// Workload first: children inherit the fake observer's variable.
	if len(os.Args) > 1 && os.Args[1] == workloadCommand {
		if err := runWorkloadCommand(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "workload:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if mode := os.Getenv(fakeObserverEnv); mode != "" {
		os.Exit(fakeObserver(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeObserver modes: "ready" serves /readyz and exits 0 on SIGTERM;
// "crash" complains and exits 3; "unready" answers /readyz with 503.
func fakeObserver(mode string, args []string) int {
	var addr string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--web.listen-address="); ok {
			addr = v
		}
	}
	if mode == "crash" {
		fmt.Fprintln(os.Stderr, "loading objects: operation not permitted")
		return 3
	}
	status := http.StatusOK
	if mode == "unready" {
		status = http.StatusServiceUnavailable
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: addr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
	})}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

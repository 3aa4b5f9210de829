package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/testenv"
)

// TestMain lets the test binary be the scenarios' workload, as the bench's
// binary is: the bench runs itself with "work".
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "work" {
		if err := work(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "alerts:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestScenarios is the suite's short form: the quick scenarios, at least
// one thrash and one benign load per detector (e4 for the host's, alone
// for the workload's; readback for the host's, mmap-scan for the
// workload's and the per-process alert), each under a real observer and
// Prometheus with the shipped rules, judged as the suite judges them.
func TestScenarios(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	prom := testenv.RequireTool(t, "prometheus", "prometheus")
	dir := testenv.BinaryDir(t)
	o := options{observer: filepath.Join(dir, "observer"), prometheus: prom, rules: filepath.Join("..", "..", "deploy", "prometheus", "rules"),
		after: 30 * time.Second, log: t.Logf}
	rules, err := readRules(o.ruleFiles())
	if err != nil {
		t.Fatal(err)
	}
	quick := 0
	for _, s := range scenarios {
		if !s.quick {
			continue
		}
		quick++
		t.Run(s.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			ob, err := o.run(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			tabulate(rules, []*observation{ob}).text(testWriter{t})
			t.Logf("the kernel counted %s", ob.Kernel)
			for _, p := range judge(rules, []*observation{ob}) {
				t.Error(p)
			}
		})
	}
	if quick < 4 {
		t.Errorf("%d quick scenarios; want a thrash and a benign load for each detector", quick)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log("\n" + string(b))
	return len(b), nil
}

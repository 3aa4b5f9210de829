package workload

import (
	"fmt"

	"github.com/thrashscope/thrashscope/internal/indicators"
)

// A workload's thrash detector: the host detector's thresholds (the
// --detector.* flags), applied to the workload's own major faults and its
// own cgroup's memory pressure. A workload thrashes while its tasks both
// fault (all kinds: a page-cache thrash is one too) at PFHigh or more and
// all stall at once (PSI full) for PSIFullHigh of the interval; it is over
// once either falls below its low mark (PFLow, PSIFullLow). One of the two
// alone, or pressure past the low mark, is worth watching.
//
// Where the cgroup has no memory.pressure, the probes' stall share of the
// workload (capped at 100 %) stands in for PSI full.
//
// It thrashes too while the host detector does and MinHigh or more of the
// host's high-fault processes are the workload's: TPF's rule, which sees a
// thrash on its first pages read back. PSI counts a read-back page as a
// stall only once the kernel has marked it part of the working set (a
// refault), so on a slow disk a workload's PSI full stays near 0 through
// the first seconds of a thrash (bench/README.md's alerts).

// judge is one step of a workload's detector: its state after this
// interval, and the reasons, from its state before, its major faults per
// second, its PSI full share (%) and how many of the thrashing host's
// high-fault processes it holds.
func judge(cfg indicators.DetectorConfig, prev int, faults, full float64, held int) (int, []string) {
	faultsHigh, fullHigh := faults >= cfg.PFHigh, full >= cfg.PSIFullHigh
	faultsLow, fullLow := faults < cfg.PFLow, full < cfg.PSIFullLow
	var reasons []string
	if held >= cfg.MinHigh {
		reasons = append(reasons, fmt.Sprintf("%d of the thrashing host's high-fault processes", held))
	}
	if faultsHigh || (prev == indicators.Thrashing && !faultsLow) {
		reasons = append(reasons, fmt.Sprintf("major faults %.0f/s", faults))
	}
	if fullHigh || (prev == indicators.Thrashing && !fullLow) || full >= cfg.PSIFullLow {
		reasons = append(reasons, fmt.Sprintf("memory full %.0f%% of the time", full))
	}
	switch {
	case held >= cfg.MinHigh, faultsHigh && fullHigh:
		return indicators.Thrashing, reasons
	case prev == indicators.Thrashing && !faultsLow && !fullLow:
		return indicators.Thrashing, reasons
	case faultsHigh || full >= cfg.PSIFullLow:
		return indicators.Monitoring, reasons
	}
	return indicators.Normal, nil
}

package build

import (
	"strconv"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/table"

	"github.com/thrashscope/thrashscope/internal/run"
)

// on restricts a selector to the dashboard's instance.
const on = `instance="$instance"`

// top keeps the k processes of sel with the highest peak over the
// dashboard's range (max_over_time ... @ end()), so a panel shows the same
// processes at every step and its legend does not churn.
func top(k int, sel string) string { return topBy(k, "pid", sel) }

// topPIDs is the selection of top: one series per pid.
func topPIDs(k int, sel string) string { return topKeys(k, "pid", sel) }

// topBy keeps the series of sel whose label (pid, instance) is among the k
// with the highest peak over the dashboard's range.
func topBy(k int, label, sel string) string {
	return sel + ` and on (` + label + `) ` + topKeys(k, label, sel)
}

func topKeys(k int, label, sel string) string {
	return `topk(` + strconv.Itoa(k) + `, max by (` + label + `) (max_over_time(` + sel + `[$__range] @ end())))`
}

// Thrashscope is the per-host dashboard: the paper's figures first, then
// the processes, the detector and the induced run.
func Thrashscope() (dashboard.Dashboard, error) {
	b := newDashboard("thrashscope", "thrashscope",
		"One host under thrashscope: the CPU and paging figures of Maziero et al. 2013, per-process faults, "+
			"stalls and working sets, the TPF-style thrash detector (Jiang and Zhang 2001), and induced runs.").
		WithVariable(datasourceVariable()).WithVariable(instanceVariable(false))
	paperRow(b)
	processesRow(b)
	detectorRow(b)
	b.WithRow(runRow())
	b.Annotations(thrashscopeAnnotations())
	b.Link(link("thrashscope fleet", "thrashscope-fleet"))
	return build(b)
}

// paperRow adds the row of the paper's CPU and paging figures.
func paperRow(b *dashboard.DashboardBuilder) {
	b.WithRow(row("Paper figures", false))
	b.WithPanel(timeseriesPanel("CPU usage: user and system",
		"Share of all CPU time spent at user level and at system level, over 10 s "+
			"(recording rule thrashscope:cpu_seconds:ratio_rate10s, from /proc/stat). "+
			"Mirrors the CPU figures of Maziero et al. 2013, Figs 4, 6, 8 and 10, one curve per mode. "+
			"The paper smoothed its 1 s samples with Bézier curves; the smooth lines here do the same. "+
			"Unit: percent of all CPUs' time (0-100 %).",
		unitShare,
		series("A", `thrashscope:cpu_seconds:ratio_rate10s{`+on+`}`, "{{mode}}"),
	).Min(0).Max(1).Span(8).Height(8))
	b.WithPanel(timeseriesPanel("Paging: swap-in and swap-out",
		"Pages swapped in and out per second, over 10 s (vmstat pswpin and pswpout, recording rules "+
			"thrashscope:swap_in_pages:rate10s and thrashscope:swap_out_pages:rate10s). "+
			"Mirrors the paging figures of Maziero et al. 2013, Figs 5, 7, 9 and 11: page-in and page-out per second. "+
			"Unit: pages per second (4 KiB pages on x86-64).",
		unitPages,
		series("A", `thrashscope:swap_in_pages:rate10s{`+on+`}`, "swap-in"),
		series("B", `thrashscope:swap_out_pages:rate10s{`+on+`}`, "swap-out"),
	).OverrideByName("swap-in", colored("blue")).OverrideByName("swap-out", colored("red")).Span(8).Height(8))
	b.WithPanel(timeseriesPanel("Block I/O: pgpgin and pgpgout",
		"What the paper's Linux counters measured: /proc/vmstat pgpgin and pgpgout count KiB of all block I/O, "+
			"swap and files alike, so these curves sit above the swap-only ones. "+
			"Mirrors Figs 5, 7, 9 and 11 of Maziero et al. 2013 as they were taken on Linux. "+
			"Unit: bytes per second, shown as KiB/s and up.",
		unitBlock,
		series("A", `rate(thrashscope_paged_in_bytes_total{`+on+`}[$__rate_interval])`, "paged in (pgpgin)"),
		series("B", `rate(thrashscope_paged_out_bytes_total{`+on+`}[$__rate_interval])`, "paged out (pgpgout)"),
	).OverrideByName("paged in (pgpgin)", colored("blue")).OverrideByName("paged out (pgpgout)", colored("red")).Span(8).Height(8))
}

// processesRow adds the row of per-process faults, stalls and working sets.
func processesRow(b *dashboard.DashboardBuilder) {
	b.WithRow(row("Processes", false))
	b.WithPanel(timeseriesPanel("Major faults per process: swap-ins and file",
		"Major page faults per second, over 30 s, of the ten processes that faulted most in the time range "+
			"(recording rule thrashscope:process_major_faults:rate30s, from the BPF perf event PAGE_FAULTS_MAJ). "+
			"Solid: swap-ins, the only faults TPF (Jiang and Zhang 2001) counts: anon (private anonymous memory) "+
			"and shmem (shared anonymous memory and tmpfs, e.g. a database's shared buffers); "+
			"dashed: file faults, page-cache misses on real files (kind unknown on procfs alone). "+
			"Unit: faults per second.",
		unitFaults,
		series("A", top(10, `thrashscope:process_major_faults:rate30s{`+on+`, kind=~"anon|shmem"}`), "{{comm}} {{pid}} {{kind}}"),
		series("B", top(10, `thrashscope:process_major_faults:rate30s{`+on+`, kind!~"anon|shmem"}`), "{{comm}} {{pid}} {{kind}}"),
	).Legend(legend(common.LegendDisplayModeTable, "max")).OverrideByQuery("B", lineStyle(dashed, "")).Span(12).Height(9))
	stall := `thrashscope:process_memory_stall_seconds:rate30s{` + on + `}`
	b.WithPanel(timeseriesPanel("Memory stall per process",
		"Share of wall time each process's threads spent stalled on memory, as PSI counts it: with in_memstall set, "+
			"in reclaim, reading back a page evicted from the working set, or throttled, on CPU and off "+
			"(recording rule thrashscope:process_memory_stall_seconds:rate30s; Source: the BPF sched_switch, "+
			"vmscan reclaim and CPU-clock probes). Solid: the whole stall; dashed: its part off CPU (waiting on I/O, "+
			"throttled), so the gap between them is reclaim on CPU. 100 % is one thread stalled all the time, "+
			"so a multi-threaded process can go above. The ten processes most stalled in the time range. "+
			"Unit: percent of one thread's time.",
		unitShare,
		series("A", top(10, stall), "{{comm}} {{pid}}"),
		series("B", `thrashscope:process_memory_stall_off_cpu_seconds:rate30s{`+on+`} and on (pid) `+topPIDs(10, stall), "{{comm}} {{pid}} off CPU"),
	).Legend(legend(common.LegendDisplayModeTable, "max")).OverrideByQuery("B", lineStyle(dashed, "")).Span(12).Height(9))
	// The five largest working sets, and the same processes' RSS and size.
	ws := `thrashscope_process_working_set_bytes{` + on + `}`
	b.WithPanel(timeseriesPanel("Working set, RSS and virtual size per process",
		"For the five processes with the largest working sets in the time range: Denning's working set (pages referenced in the "+
			"last --wss.interval, solid), the resident set (dashed) and the virtual size (dotted). "+
			"TPF (Jiang and Zhang 2001) plots each process's memory demand against its RSS: a working set "+
			"above the RSS means the process keeps faulting its own pages back in. Unit: bytes.",
		unitBytes,
		series("A", top(5, ws), "{{comm}} {{pid}} working set"),
		series("B", `thrashscope_process_resident_bytes{`+on+`} and on (pid) `+topPIDs(5, ws), "{{comm}} {{pid}} RSS"),
		series("C", `thrashscope_process_virtual_bytes{`+on+`} and on (pid) `+topPIDs(5, ws), "{{comm}} {{pid}} virtual"),
	).Legend(legend(common.LegendDisplayModeTable, "lastNotNull")).
		OverrideByQuery("B", lineStyle(dashed, "")).OverrideByQuery("C", lineStyle(dotted, "")).Span(12).Height(9))
	b.WithPanel(topThrashers())
}

// topThrashers is the table of the tracked processes, busiest first.
func topThrashers() *table.PanelBuilder {
	byProcess := func(agg, metric string) string { return agg + ` by (pid, comm) (` + metric + `{` + on + `})` }
	return tablePanel("Top thrashers",
		"The tracked processes, busiest first: major faults per second and memory-stall share over 30 s, "+
			"resident, swapped-out and working-set size, and whether the thrash detector holds the process in its "+
			"high-fault set (TPF's PF_High/PF_Low hysteresis, Jiang and Zhang 2001). "+
			"Instant queries joined by pid and comm. Unit: per column (faults/s, %, bytes).",
		[]string{"comm", "pid"}, 15,
		[]column{
			{ref: "A", name: "major faults/s", unit: unitFaults},
			{ref: "B", name: "memory stall", unit: unitShare},
			{ref: "C", name: "RSS", unit: unitBytes},
			{ref: "D", name: "swap", unit: unitBytes},
			{ref: "E", name: "working set", unit: unitBytes},
			{ref: "F", name: "high-fault", unit: unitNone, mappings: []dashboard.ValueMapping{valueMap(map[string]dashboard.ValueMappingResult{
				"0": {Text: ptr("no"), Color: ptr("green"), Index: ptr(int32(0))},
				"1": {Text: ptr("yes"), Color: ptr("red"), Index: ptr(int32(1))},
			})}},
		},
		instant("A", byProcess("sum", "thrashscope:process_major_faults:rate30s")),
		instant("B", byProcess("sum", "thrashscope:process_memory_stall_seconds:rate30s")),
		instant("C", byProcess("sum", "thrashscope_process_resident_bytes")),
		instant("D", byProcess("sum", "thrashscope_process_swap_bytes")),
		instant("E", byProcess("sum", "thrashscope_process_working_set_bytes")),
		instant("F", byProcess("max", "thrashscope_process_high_fault")),
	).Span(12).Height(9)
}

// detectorRow adds the row of the thrash detector, PSI and fault latency.
func detectorRow(b *dashboard.DashboardBuilder) {
	b.WithRow(row("Detector", false))
	b.WithPanel(stateTimeline("Thrash detector state",
		"The thrash detector's state: normal; monitoring while two or more processes are in the high-fault set; "+
			"thrashing when, on top of that, CPU utilisation is below --detector.cpu-low or PSI memory full is "+
			"above --detector.psi-full. The three states of TPF (Jiang and Zhang 2001), with thrashing in place "+
			"of TPF's protection. Unit: state (0 normal, 1 monitoring, 2 thrashing).",
		series("A", `thrashscope_thrashing_state{`+on+`}`, "detector"),
	).Span(24).Height(5))
	b.WithPanel(timeseriesPanel("High-fault processes",
		"Processes in the high-fault set: they join above --detector.pf-high (10) major faults/s and leave "+
			"below --detector.pf-low (1), as in TPF (Jiang and Zhang 2001). Two or more (dashed line) put the "+
			"detector in monitoring. Unit: processes.",
		unitCount,
		series("A", `thrashscope_high_fault_processes{`+on+`}`, "high-fault processes"),
	).Thresholds(thresholds(at(2, "yellow"))).ThresholdsStyle(thresholdStyle(true)).Span(8).Height(8))
	b.WithPanel(timeseriesPanel("Working-set ratio",
		"Sum of the tracked processes' working sets (Denning) over the memory available to them: the run "+
			"cgroup's limit for a run's consumers, otherwise MemAvailable plus their resident memory. Above the "+
			"line at 1 they cannot all fit; ThrashscopeWorkingSetOvercommit fires after 2 m there. "+
			"Unit: ratio (1 = exactly full).",
		unitNone,
		series("A", `thrashscope_working_set_ratio{`+on+`}`, "working sets / memory"),
	).Thresholds(thresholds(at(1, "red"))).ThresholdsStyle(thresholdStyle(false)).Decimals(2).Span(8).Height(8))
	b.WithPanel(timeseriesPanel("Memory pressure (PSI)",
		"Share of wall time in which at least one (some) or every (full) non-idle task was stalled on memory, "+
			"over 10 s like the kernel's avg10 (recording rule thrashscope:pressure_memory_stalled_seconds:rate10s; "+
			"Source: /proc/pressure/memory). Full above 60 % for 30 s fires ThrashscopeMemoryPressureFull. "+
			"Unit: percent of wall time.",
		unitShare,
		series("A", `thrashscope:pressure_memory_stalled_seconds:rate10s{`+on+`}`, "{{kind}}"),
	).Min(0).Max(1).OverrideByName("some", colored("orange")).OverrideByName("full", colored("red")).Span(8).Height(8))
	b.WithPanel(timeseriesPanel("Refaults and restores",
		"Evicted pages faulted back in while still part of the working set (refaults, solid), and those among "+
			"them that had been in the working set when evicted (restores, dashed), by anon and file "+
			"(Source: /proc/vmstat workingset_refault_* and workingset_restore_*). Refaults are Denning's "+
			"thrashing in the kernel's own terms: memory too small for the working sets. Unit: pages per second.",
		unitPages,
		series("A", `sum by (type) (rate(thrashscope_workingset_refaults_total{`+on+`}[$__rate_interval]))`, "refaults {{type}}"),
		series("B", `sum by (type) (rate(thrashscope_workingset_restores_total{`+on+`}[$__rate_interval]))`, "restores {{type}}"),
	).OverrideByQuery("B", lineStyle(dashed, "")).Span(12).Height(8))
	b.WithPanel(heatmapPanel("Major-fault service time",
		"How long major faults take to serve, anon and file together: from fault entry to the kernel "+
			"accounting the fault as major (Source: BPF raw tracepoints page_fault_user and page_fault_kernel, "+
			"histogram thrashscope_major_fault_latency_seconds). Each column is one interval; the colour is the "+
			"faults per second that fell in the bucket. Unit: seconds (y axis), faults per second (colour).",
		unitSecond, unitFaults,
		buckets(`sum by (le) (rate(thrashscope_major_fault_latency_seconds_bucket{`+on+`}[$__rate_interval]))`),
	).Span(12).Height(8))
}

// runRow adds the row of an induced run, collapsed.
func runRow() *dashboard.RowBuilder {
	// Collapsed: runs are occasional, the rows above are always live.
	r := row("Run", true)
	r.WithPanel(statPanel("Most recent run",
		"The most recent run, active or ended, and its preset: "+run.PresetHelp()+". "+
			"Below it, the swap device the run emulated (none: the host's swap as it is; hdd-2013, the papers' 7,200 rpm disk; cloud-3000; custom) "+
			"and what the kernel's I/O throttle held on this host: reads and writes on cgroup v2, reads (swap-ins) only on cgroup v1. "+
			"Unit: none (the run id and preset; the device).",
		unitNone, common.BigValueTextModeName,
		series("A", `thrashscope_run_info{`+on+`}`, "{{run_id}} ({{preset}})"),
		series("B", `thrashscope_run_swap_device_info{`+on+`}`, "swap {{profile}} ({{throttled}} throttled)"),
	).Span(4).Height(8))
	r.WithPanel(timeseriesPanel("Consumers: active and planned",
		"Consumers of the run holding their memory now (solid) against those the schedule has active now "+
			"(dashed): consumer i runs from lead_in + i·t_c to t_f = lead_in + (i+N+1)·t_c, the schedule of "+
			"Maziero et al. 2013. Active above planned is a consumer running past its t_f. Unit: consumers.",
		unitCount,
		series("A", `thrashscope_run_consumers_active{`+on+`}`, "active"),
		series("B", `thrashscope_run_consumers_planned{`+on+`}`, "planned"),
	).OverrideByQuery("B", lineStyle(dashed, "")).Span(10).Height(8))
	r.WithPanel(timeseriesPanel("Demand and limit",
		"Memory the active consumers ask for (active × S) against the run cgroup's memory limit (red, dashed): "+
			"the run overcommits while demand is above the limit, as the paper's 25 × 100 MB did in 1 GB of RAM "+
			"(Maziero et al. 2013). TPF (Jiang and Zhang 2001) plots the same demand against RSS per process. "+
			"Unit: bytes.",
		unitBytes,
		series("A", `thrashscope_run_demand_bytes{`+on+`}`, "demand"),
		series("B", `thrashscope_run_memory_limit_bytes{`+on+`}`, "cgroup limit"),
	).OverrideByQuery("B", lineStyle(dashed, "red")).Span(10).Height(8))
	r.WithPanel(heatmapPanel("Write-cycle duration",
		"How long the consumers' write cycles took: W writes to random offsets, without the t_s sleep, every "+
			"consumer (histogram thrashscope_run_write_cycle_duration_seconds). In RAM a cycle takes milliseconds; "+
			"thrashing stretches it to seconds, the slowdown the benchmark of Maziero et al. 2013 provokes. "+
			"Unit: seconds (y axis), cycles per second (colour).",
		unitSecond, unitCycles,
		buckets(`sum by (le) (rate(thrashscope_run_write_cycle_duration_seconds_bucket{`+on+`}[$__rate_interval]))`),
	).Span(12).Height(8))
	r.WithPanel(timeseriesPanel("Lateness per consumer",
		"How long past its planned finish t_f each consumer ended, or, still running, is now. "+
			"Maziero et al. 2013 saw consumers finish late under thrashing (Windows, in e2); thrashscope keeps "+
			"it per consumer. Unit: seconds.",
		unitSecond,
		series("A", `thrashscope_run_consumer_lateness_seconds{`+on+`}`, "{{consumer}}"),
	).Legend(legend(common.LegendDisplayModeTable, "max")).Span(12).Height(8))
	return r
}

// thrashscopeAnnotations mark runs, their policy's actions and the
// detector's transitions.
func thrashscopeAnnotations() []cog.Builder[dashboard.AnnotationQuery] {
	return []cog.Builder[dashboard.AnnotationQuery]{
		// A new run_id series is a run that just started.
		annotation("Run started", "blue",
			`thrashscope_run_info{`+on+`} unless thrashscope_run_info{`+on+`} offset 5s`,
			"run {{run_id}} started", "preset {{preset}}", "preset"),
		// One region from the first consumer's start to the last one's end.
		annotation("Run consumers active", "purple",
			`thrashscope_run_info{`+on+`} and on (instance) (thrashscope_run_consumers_active{`+on+`} > 0)`,
			"run {{run_id}}: consumers active", "preset {{preset}}", "preset"),
		annotation("Run ended", "blue",
			`(changes(thrashscope_runs_total{`+on+`}[5s]) > 0) * on (instance) group_left (run_id, preset) thrashscope_run_info{`+on+`}`,
			"run {{run_id}} {{outcome}}", "preset {{preset}}", "outcome,preset"),
		// The run's policy acting on its consumers (freeze, thaw, protect,
		// release), labelled with the policy.
		annotation("Policy actions", "green",
			`(changes(thrashscope_run_policy_decisions_total{`+on+`}[5s]) > 0) * on (instance) group_left (policy) thrashscope_run_policy_info{`+on+`}`,
			"{{policy}}: {{kind}}", "the run's policy {{policy}} took a {{kind}} action", "policy,kind"),
		annotation("Detector transitions", "orange",
			`changes(thrashscope_detector_transitions_total{`+on+`}[5s]) > 0`,
			"detector: {{to}}", "thrash detector entered {{to}}", "to"),
	}
}

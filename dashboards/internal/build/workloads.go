package build

import (
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/table"
)

// wl groups a workload's series by the labels that name it.
const wl = "cgroup, unit, pod_uid, container_id"

// Workloads is the per-workload dashboard: which units, containers and
// pods are thrashing on the hosts picked, with the faults by kind and the
// stall they cost, each workload's own PSI, and a link to its host's
// processes.
func Workloads() (dashboard.Dashboard, error) {
	b := newDashboard("thrashscope-workloads", "thrashscope workloads",
		"Which workload is thrashing: per-cgroup major faults by kind, memory stall and PSI, for systemd units, "+
			"containers and pods, with the labels to join them to kube-state-metrics.").
		WithVariable(datasourceVariable()).WithVariable(instanceVariable(true))
	b.WithPanel(statPanel("Workloads thrashing",
		"How many workloads (cgroups: systemd units, containers, pods) their own detectors hold in the thrashing "+
			"state now (red from one): major faults at --detector.pf-high a second or more and the cgroup's PSI "+
			"memory full at --detector.psi-full or more. Source: the BPF probes per cgroup and the cgroup's memory.pressure. Unit: workloads.",
		unitCount, common.BigValueTextModeValueAndName,
		series("A", `count(thrashscope_cgroup_thrashing_state{`+onAll+`} == 2) or vector(0)`, "thrashing"),
		series("B", `count(thrashscope_cgroup_thrashing_state{`+onAll+`})`, "watched"),
	).Thresholds(thresholds(at(1, "red"))).Span(6).Height(8))
	b.WithPanel(stateTimeline("Thrash state per workload",
		"Each watched workload's detector, one band per cgroup: monitoring while it faults or stalls, thrashing while it "+
			"does both past the thresholds. TPF's states (Jiang and Zhang 2001) on the cgroup's own figures. "+
			"Unit: state (0 normal, 1 monitoring, 2 thrashing).",
		series("A", `max by (instance, cgroup) (thrashscope_cgroup_thrashing_state{`+onAll+`})`, "{{instance}} {{cgroup}}"),
	).Span(18).Height(8))
	b.WithPanel(workloadTable().Span(24).Height(10))
	b.WithPanel(diagnosisTable().Span(24).Height(8))
	swapIns := `thrashscope:cgroup_major_faults:rate30s{` + onAll + `, kind=~"anon|shmem"}`
	faults := `sum by (instance, ` + wl + `) (` + swapIns + `)`
	files := `sum by (instance, ` + wl + `) (thrashscope:cgroup_major_faults:rate30s{` + onAll + `, kind!~"anon|shmem"})`
	all := `thrashscope:cgroup_major_faults:rate30s{` + onAll + `}`
	b.WithPanel(timeseriesPanel("Major faults per workload: swap-ins and file",
		"Major page faults per second of every task in the workload, over 30 s (recording rule "+
			"thrashscope:cgroup_major_faults:rate30s; Source: the BPF perf event PAGE_FAULTS_MAJ, counted per cgroup). "+
			"Solid: swap-ins (anon and shmem); dashed: file faults, a page-cache thrash. "+
			"The ten workloads that faulted most in the time range. Unit: faults per second.",
		unitFaults,
		series("A", faults+` and on (cgroup) `+topKeys(10, "cgroup", all), "{{cgroup}}"),
		series("B", files+` and on (cgroup) `+topKeys(10, "cgroup", all), "{{cgroup}} file"),
	).Legend(legend(common.LegendDisplayModeTable, "max")).OverrideByQuery("B", lineStyle(dashed, "")).Span(12).Height(9))
	psi := `thrashscope:cgroup_pressure_memory_stalled_seconds:rate10s{` + onAll + `, kind="full"}`
	b.WithPanel(timeseriesPanel("Memory pressure per workload",
		"Share of wall time all of the workload's tasks were stalled on memory at once: the cgroup's own "+
			"memory.pressure full, over 10 s (recording rule thrashscope:cgroup_pressure_memory_stalled_seconds:rate10s; "+
			"Source: the cgroup's memory.pressure). "+
			"The ten workloads most stalled in the time range. Unit: percent of wall time.",
		unitShare,
		series("A", topBy(10, "cgroup", psi), "{{cgroup}}"),
	).Legend(legend(common.LegendDisplayModeTable, "max")).Min(0).Max(1).Span(12).Height(9))
	b.Annotation(annotation("Workloads thrashing", "red",
		// Thrashing now and not 5 s before: a workload enters the
		// top-K as it starts to fault, so its first sample may
		// already say thrashing, which changes() would not see.
		`thrashscope_cgroup_thrashing_state{`+onAll+`} == 2 unless thrashscope_cgroup_thrashing_state{`+onAll+`} offset 5s == 2`,
		"{{cgroup}} thrashing", "the workload {{cgroup}} on {{instance}} entered thrashing", "instance,cgroup"))
	b.Link(link("thrashscope host", "thrashscope")).Link(link("thrashscope fleet", "thrashscope-fleet"))
	return build(b)
}

// workloadTable lists the watched workloads now, thrashing first, each
// linked to its host's dashboard (its processes).
func workloadTable() *table.PanelBuilder {
	by := func(agg, expr string) string { return agg + ` by (instance, ` + wl + `) (` + expr + `)` }
	return tablePanel("Workloads",
		"The watched workloads now (the observer's --cgroup.top-k busiest cgroups), thrashing first: detector state, "+
			"swap-ins and file faults per second and memory-stall share summed over their tasks (30 s, from the BPF probes), "+
			"the cgroup's own PSI some and full (10 s, memory.pressure), its memory.current and the limit it lives under (its own or an ancestor's memory.max). "+
			"pod_uid joins kube_pod_info's uid. Click an instance for its host dashboard and its processes. "+
			"Source: the BPF probes per cgroup, and the cgroup's memory.pressure, memory.current and memory.max. Unit: per column.",
		[]string{"instance", "cgroup", "unit", "pod_uid", "container_id"}, 20,
		[]column{
			{ref: "A", name: "state", unit: unitNone, mappings: []dashboard.ValueMapping{stateMapping()}},
			{ref: "B", name: "swap-ins/s", unit: unitFaults},
			{ref: "C", name: "file faults/s", unit: unitFaults},
			{ref: "D", name: "memory stall", unit: unitShare},
			{ref: "E", name: "PSI some", unit: unitShare},
			{ref: "F", name: "PSI full", unit: unitShare},
			{ref: "G", name: "memory", unit: unitBytes},
			{ref: "H", name: "limit", unit: unitBytes},
		},
		instant("A", by("max", `thrashscope_cgroup_thrashing_state{`+onAll+`}`)),
		instant("B", by("sum", `thrashscope:cgroup_major_faults:rate30s{`+onAll+`, kind=~"anon|shmem"}`)),
		instant("C", by("sum", `thrashscope:cgroup_major_faults:rate30s{`+onAll+`, kind!~"anon|shmem"}`)),
		instant("D", by("sum", `thrashscope:cgroup_memory_stall_seconds:rate30s{`+onAll+`}`)),
		instant("E", by("sum", `thrashscope:cgroup_pressure_memory_stalled_seconds:rate10s{`+onAll+`, kind="some"}`)),
		instant("F", by("sum", `thrashscope:cgroup_pressure_memory_stalled_seconds:rate10s{`+onAll+`, kind="full"}`)),
		instant("G", by("sum", `thrashscope_cgroup_memory_current_bytes{`+onAll+`}`)),
		instant("H", by("sum", `thrashscope_cgroup_memory_limit_bytes{`+onAll+`}`)),
	).OverrideByName("instance", instanceLink("processes on ${__value.raw}")).Decimals(1)
}

// diagnosisTable lists the open diagnoses: why each thrashing workload
// thrashes and what would end it.
func diagnosisTable() *table.PanelBuilder {
	info := `thrashscope_diagnosis_info{` + onAll + `}`
	return tablePanel("Why they thrash",
		"One row per thrash going on (docs/diagnoses.md): its kind, the limit that binds it (its own, memory.high, an "+
			"ancestor's, the host's memory) and where it is set, how much more memory that limit would need to hold the "+
			"working set, the group that grew into the memory where the limit is shared, the first remedy and the one-line "+
			"summary; GET /api/v1/diagnoses on the host has the interval and every remedy. "+
			"Source: the workload's cgroup limits read up its tree, its processes' working sets, the charges under a shared limit. Unit: bytes.",
		[]string{"instance", "group", "kind", "binding", "binding_group", "culprit", "remedy", "summary"}, 20,
		[]column{{ref: "A", name: "shortfall", unit: unitBytes}},
		instant("A", `max by (instance, group, kind, binding) (thrashscope_diagnosis_shortfall_bytes{`+onAll+`})`+
			` * on (instance, group) group_left (binding_group, culprit, remedy, summary) max by (instance, group, binding_group, culprit, remedy, summary) (`+info+`)`),
	).Decimals(0)
}

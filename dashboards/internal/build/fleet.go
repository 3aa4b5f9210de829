package build

import (
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/table"
)

// onAll restricts a selector to the instances picked (All by default).
const onAll = `instance=~"$instance"`

// Fleet is the overview of every observer: which hosts thrash, and which
// are stalled on memory the most.
func Fleet() (dashboard.Dashboard, error) {
	b := newDashboard("thrashscope-fleet", "thrashscope fleet",
		"Every thrashscope observer at once: which hosts are thrashing, and which are stalled on memory the most.").
		WithVariable(datasourceVariable()).WithVariable(instanceVariable(true))
	b.WithPanel(statPanel("Instances thrashing",
		"How many observers' thrash detectors are in the thrashing state now (red from one), out of the "+
			"observers Prometheus scrapes. The detector follows TPF's states (Jiang and Zhang 2001). Unit: instances.",
		unitCount, common.BigValueTextModeValueAndName,
		series("A", `count(thrashscope_thrashing_state{`+onAll+`} == 2) or vector(0)`, "thrashing"),
		series("B", `count(thrashscope_build_info{`+onAll+`})`, "observed"),
	).Thresholds(thresholds(at(1, "red"))).OverrideByQuery("B", colored("blue")).Span(6).Height(7))
	b.WithPanel(stateTimeline("Thrashing state per instance",
		"Each observer's thrash detector, one band per instance: normal; monitoring while two or more processes "+
			"are in the high-fault set; thrashing when CPU is starved or PSI memory full is high as well. "+
			"TPF's three states (Jiang and Zhang 2001). Unit: state (0 normal, 1 monitoring, 2 thrashing).",
		series("A", `max by (instance) (thrashscope_thrashing_state{`+onAll+`})`, "{{instance}}"),
	).Span(18).Height(7))
	b.WithPanel(timeseriesPanel("Top hosts by memory stall",
		"The five hosts whose tasks were stalled on memory the largest share of the time in the time range, over 30 s "+
			"(PSI memory some; recording rule thrashscope:pressure_memory_stalled_seconds:rate30s; "+
			"Source: /proc/pressure/memory). Unit: percent of wall time.",
		unitShare,
		series("A", topBy(5, "instance", `thrashscope:pressure_memory_stalled_seconds:rate30s{`+onAll+`, kind="some"}`), "{{instance}}"),
	).Min(0).Max(1).Span(12).Height(8))
	b.WithPanel(timeseriesPanel("Top hosts by swap-in",
		"The five hosts that swapped in the most pages per second in the time range, over 30 s (vmstat pswpin; recording rule "+
			"thrashscope:swap_in_pages:rate30s): the page-in curve of Maziero et al. 2013, Figs 5, 7, 9 and 11, "+
			"across the fleet. Unit: pages per second.",
		unitPages,
		series("A", topBy(5, "instance", `thrashscope:swap_in_pages:rate30s{`+onAll+`}`), "{{instance}}"),
	).Span(12).Height(8))
	b.WithPanel(fleetInstances().Span(24).Height(9))
	b.Annotation(annotation("Hosts entering thrashing", "red",
		`changes(thrashscope_detector_transitions_total{`+onAll+`, to="thrashing"}[5s]) > 0`,
		"{{instance}} thrashing", "the thrash detector on {{instance}} entered thrashing", "instance"))
	b.Link(link("thrashscope host", "thrashscope"))
	return build(b)
}

// fleetInstances is the table of every observer now, each linked to its
// host dashboard.
func fleetInstances() *table.PanelBuilder {
	return tablePanel("Instances",
		"Every observer now: detector state (TPF's states, Jiang and Zhang 2001), PSI memory some and full over "+
			"30 s (Source: /proc/pressure/memory), pages swapped in per second, processes in the high-fault set, "+
			"the working-set ratio (Denning) and the observer's version. Click an instance for its dashboard. "+
			"Instant queries joined by instance. Unit: per column (state, %, pages/s, processes, ratio).",
		[]string{"instance", "version"}, 0,
		[]column{
			{ref: "A", name: "state", unit: unitNone, mappings: []dashboard.ValueMapping{stateMapping()}},
			{ref: "B", name: "PSI some", unit: unitShare},
			{ref: "C", name: "PSI full", unit: unitShare},
			{ref: "D", name: "swap-in", unit: unitPages},
			{ref: "E", name: "high-fault processes", unit: unitCount},
			{ref: "F", name: "working-set ratio", unit: unitNone},
			{ref: "G", name: "build", unit: unitNone, hidden: true},
		},
		instant("A", `max by (instance) (thrashscope_thrashing_state{`+onAll+`})`),
		instant("B", `sum by (instance) (thrashscope:pressure_memory_stalled_seconds:rate30s{`+onAll+`, kind="some"})`),
		instant("C", `sum by (instance) (thrashscope:pressure_memory_stalled_seconds:rate30s{`+onAll+`, kind="full"})`),
		instant("D", `sum by (instance) (thrashscope:swap_in_pages:rate30s{`+onAll+`})`),
		instant("E", `max by (instance) (thrashscope_high_fault_processes{`+onAll+`})`),
		instant("F", `max by (instance) (thrashscope_working_set_ratio{`+onAll+`})`),
		instant("G", `max by (instance, version) (thrashscope_build_info{`+onAll+`})`),
	).OverrideByName("instance", instanceLink("thrashscope on ${__value.raw}")).Decimals(2)
}

// Package row holds the host's row of indicators, the one type that the
// sampler computes, samples.csv records (store.Row), and the live page's
// history (history.Point) keeps: neutral, so none of them imports another
// for it.
package row

// Host is one sample's row of host indicators, declared once: the paper's
// (CPU user and system %, pages swapped in and out per second) and the
// ones thrashscope adds. The run recorder's samples.csv (store.Row), the
// live page's history (history.Point) and its figures hold this type;
// HostColumns names each field as samples.csv does. A new indicator is a
// field here and its line in HostColumns.
type Host struct {
	// CPU shares of all CPUs, 0-100. User includes nice; system includes
	// irq and softirq, as top counts them.
	CPUUserPercent, CPUSystemPercent            float64
	SwapInPagesPerSecond, SwapOutPagesPerSecond float64
	CPUIOWaitPercent                            float64
	// PagedIn/Out are pgpgin/pgpgout: KiB of all block I/O.
	PagedInKiBPerSecond, PagedOutKiBPerSecond float64
	MajorFaultsPerSecond                      float64
	// PSI memory stall shares of the interval, 0-100; zero without PSI.
	PressureSomePercent, PressureFullPercent float64
}

// HostColumn is one of Host's indicators: its samples.csv column, its
// field, and whether it is a share (0-100) rather than a rate.
type HostColumn struct {
	Name    string
	Field   func(*Host) *float64
	Percent bool
}

// HostFields is how many indicators Host holds.
const HostFields = 10

// HostColumns are Host's fields in samples.csv's order.
var HostColumns = [HostFields]HostColumn{
	{"cpu_user_percent", func(h *Host) *float64 { return &h.CPUUserPercent }, true},
	{"cpu_system_percent", func(h *Host) *float64 { return &h.CPUSystemPercent }, true},
	{"swap_in_pages_per_second", func(h *Host) *float64 { return &h.SwapInPagesPerSecond }, false},
	{"swap_out_pages_per_second", func(h *Host) *float64 { return &h.SwapOutPagesPerSecond }, false},
	{"cpu_iowait_percent", func(h *Host) *float64 { return &h.CPUIOWaitPercent }, true},
	{"paged_in_kib_per_second", func(h *Host) *float64 { return &h.PagedInKiBPerSecond }, false},
	{"paged_out_kib_per_second", func(h *Host) *float64 { return &h.PagedOutKiBPerSecond }, false},
	{"major_faults_per_second", func(h *Host) *float64 { return &h.MajorFaultsPerSecond }, false},
	{"pressure_some_percent", func(h *Host) *float64 { return &h.PressureSomePercent }, true},
	{"pressure_full_percent", func(h *Host) *float64 { return &h.PressureFullPercent }, true},
}

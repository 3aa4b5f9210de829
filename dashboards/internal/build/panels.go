// Package build constructs thrashscope's Grafana dashboards in Go, so every
// panel follows the same conventions by construction: the ${datasource}
// variable, smooth lines, a unit, and a description that names its source.
// go generate ./dashboards writes the JSON that Grafana loads.
package build

import (
	"strconv"

	"github.com/thrashscope/thrashscope/dashboards"
	"github.com/thrashscope/thrashscope/internal/indicators"
)

// datasource is the dashboards' data source variable: every panel,
// target, annotation and variable query goes through it.
const datasource = "${datasource}"

// schemaVersion is Grafana 10.4's dashboard schema; Grafana 10 and later
// load it without migration.
const schemaVersion = 39

func ds() *dashboards.DatasourceRef {
	return &dashboards.DatasourceRef{Type: "prometheus", UID: datasource}
}

func ptr[T any](v T) *T { return &v }

// Units, as Grafana names them. count:<unit> scales with K and M and
// appends the unit.
const (
	unitShare  = "percentunit" // 0-1 shown as 0-100 %
	unitBytes  = "bytes"       // IEC: KiB, MiB
	unitBlock  = "binBps"      // bytes/s shown as KiB/s, MiB/s
	unitSecond = "s"
	unitCount  = "short"
	unitNone   = "none"
	unitPages  = "count:pages/s"
	unitFaults = "count:faults/s"
	unitCycles = "count:cycles/s"
)

// Query constructors.

func series(ref, expr, legend string) dashboards.Target {
	return dashboards.Target{RefID: ref, Datasource: ds(), EditorMode: "code", Expr: expr,
		LegendFormat: legend, Format: "time_series", Range: true}
}

// instant is a table query: one row per series at the panel's end time.
func instant(ref, expr string) dashboards.Target {
	return dashboards.Target{RefID: ref, Datasource: ds(), EditorMode: "code", Expr: expr,
		Format: "table", Instant: true}
}

// buckets is a histogram query for a heatmap: Grafana de-accumulates the
// le buckets itself.
func buckets(expr string) dashboards.Target {
	return dashboards.Target{RefID: "A", Datasource: ds(), EditorMode: "code", Expr: expr,
		LegendFormat: "{{le}}", Format: "heatmap", Range: true}
}

// Panel constructors. Each takes the description first: it is what a
// reader sees on hover, so it is written with the panel, not after.

func baseThresholds(steps ...dashboards.ThresholdStep) *dashboards.Thresholds {
	return &dashboards.Thresholds{Mode: "absolute",
		Steps: append([]dashboards.ThresholdStep{{Color: "green"}}, steps...)}
}

func timeseries(title, desc, unit string, targets ...dashboards.Target) dashboards.Panel {
	return dashboards.Panel{
		Type: "timeseries", Title: title, Description: desc, Datasource: ds(), Targets: targets,
		FieldConfig: &dashboards.FieldConfig{
			Defaults: dashboards.FieldDefaults{
				Unit:       unit,
				Color:      &dashboards.FieldColor{Mode: "palette-classic"},
				Thresholds: baseThresholds(),
				Mappings:   []dashboards.Mapping{},
				Custom: &dashboards.Custom{
					DrawStyle: "line",
					// The paper smoothed its noisy 1 s samples with Bézier
					// curves; a spline through the points does the same.
					LineInterpolation: "smooth",
					LineWidth:         ptr(1),
					FillOpacity:       ptr(10),
					GradientMode:      "none",
					ShowPoints:        "never",
					PointSize:         5,
					SpanNulls:         ptr(false),
					AxisPlacement:     "auto",
					BarAlignment:      ptr(0),
					Stacking:          &dashboards.Stacking{Mode: "none", Group: "A"},
					ThresholdsStyle:   &dashboards.ThresholdsStyle{Mode: "off"},
					ScaleDistribution: &dashboards.ScaleDistribution{Type: "linear"},
					HideFrom:          &dashboards.HideFrom{},
				},
			},
			Overrides: []dashboards.Override{},
		},
		Options: &dashboards.Options{
			Legend:  &dashboards.Legend{ShowLegend: ptr(true), DisplayMode: "list", Placement: "bottom", Calcs: &[]string{}},
			Tooltip: &dashboards.Tooltip{Mode: "multi", Sort: "desc"},
		},
	}
}

// stateColors are the detector's states' colours, indexed as
// indicators.StateNames.
var stateColors = [...]string{indicators.Normal: "green", indicators.Monitoring: "yellow", indicators.Thrashing: "red"}

// stateTimeline shows the detector's states as coloured bands.
func stateTimeline(title, desc string, states []string, colors []string, targets ...dashboards.Target) dashboards.Panel {
	m := dashboards.Mapping{Type: "value", Options: map[string]dashboards.MappingResult{}}
	for i, s := range states {
		m.Options[strconv.Itoa(i)] = dashboards.MappingResult{Text: s, Color: colors[i], Index: i}
	}
	return dashboards.Panel{
		Type: "state-timeline", Title: title, Description: desc, Datasource: ds(), Targets: targets,
		FieldConfig: &dashboards.FieldConfig{
			Defaults: dashboards.FieldDefaults{
				Unit:       unitNone,
				Min:        ptr(0.0),
				Max:        ptr(float64(len(states) - 1)),
				Color:      &dashboards.FieldColor{Mode: "thresholds"},
				Thresholds: baseThresholds(),
				Mappings:   []dashboards.Mapping{m},
				Custom: &dashboards.Custom{
					LineWidth:   ptr(0),
					FillOpacity: ptr(80),
					HideFrom:    &dashboards.HideFrom{},
				},
			},
			Overrides: []dashboards.Override{},
		},
		Options: &dashboards.Options{
			MergeValues: ptr(true),
			ShowValue:   "auto",
			AlignValue:  "left",
			RowHeight:   ptr(0.9),
			Legend:      &dashboards.Legend{ShowLegend: ptr(true), DisplayMode: "list", Placement: "bottom", Calcs: &[]string{}},
			Tooltip:     &dashboards.Tooltip{Mode: "single", Sort: "none"},
		},
	}
}

// heatmap shows a Prometheus histogram as it comes: buckets on the y axis
// (yUnit), the rate in each bucket as colour (cellUnit).
func heatmap(title, desc, yUnit, cellUnit string, target dashboards.Target) dashboards.Panel {
	return dashboards.Panel{
		Type: "heatmap", Title: title, Description: desc, Datasource: ds(), Targets: []dashboards.Target{target},
		FieldConfig: &dashboards.FieldConfig{
			Defaults: dashboards.FieldDefaults{
				Unit:     cellUnit,
				Mappings: []dashboards.Mapping{},
				Custom: &dashboards.Custom{
					ScaleDistribution: &dashboards.ScaleDistribution{Type: "linear"},
					HideFrom:          &dashboards.HideFrom{},
				},
			},
			Overrides: []dashboards.Override{},
		},
		Options: &dashboards.Options{
			Calculate: ptr(false), // the buckets are the histogram's own
			CellGap:   ptr(1),
			Color: &dashboards.HeatmapColor{Mode: "scheme", Scheme: "Oranges", Fill: "dark-orange",
				Scale: "exponential", Exponent: 0.5, Steps: 64},
			YAxis:        &dashboards.HeatmapYAxis{AxisPlacement: "left", Unit: yUnit},
			CellValues:   &dashboards.CellValues{Unit: cellUnit},
			RowsFrame:    &dashboards.RowsFrame{Layout: "le"},
			FilterValues: &dashboards.FilterValues{Le: ptr(1e-9)}, // hide empty buckets
			ShowValue:    "never",
			Legend:       &dashboards.Legend{Show: ptr(true)},
			Tooltip:      &dashboards.Tooltip{Mode: "single", YHistogram: ptr(true), ShowColorScale: ptr(false)},
			Exemplars:    &dashboards.ExemplarConfig{Color: "rgba(255,0,255,0.7)"},
		},
	}
}

// stat shows one value per query, or its legend when textMode is "name".
func stat(title, desc, unit, textMode string, targets ...dashboards.Target) dashboards.Panel {
	return dashboards.Panel{
		Type: "stat", Title: title, Description: desc, Datasource: ds(), Targets: targets,
		FieldConfig: &dashboards.FieldConfig{
			Defaults: dashboards.FieldDefaults{
				Unit:       unit,
				Color:      &dashboards.FieldColor{Mode: "thresholds"},
				Thresholds: baseThresholds(),
				Mappings:   []dashboards.Mapping{},
			},
			Overrides: []dashboards.Override{},
		},
		Options: &dashboards.Options{
			ReduceOptions: &dashboards.ReduceOptions{Calcs: []string{"lastNotNull"}, Fields: ""},
			TextMode:      textMode,
			ColorMode:     "value",
			GraphMode:     "none",
			JustifyMode:   "auto",
			Orientation:   "auto",
			WideLayout:    ptr(true),
			ShowPercent:   ptr(false),
		},
	}
}

// column is one value column of a joined table: the instant query's
// "Value #<ref>" field renamed, with its unit.
type column struct {
	ref, name, unit string
	mappings        []dashboards.Mapping
	hidden          bool // a query run for its labels only
}

// table joins instant queries by their remaining labels (merge), drops the
// time column, sorts by the first value column and keeps the top limit.
func table(title, desc string, keys []string, limit int, cols []column, targets ...dashboards.Target) dashboards.Panel {
	order := map[string]int{}
	for i, k := range keys {
		order[k] = i
	}
	var overrides []dashboards.Override
	for i, c := range cols {
		field := "Value #" + c.ref
		order[field] = len(keys) + i
		props := []dashboards.Property{{ID: "displayName", Value: c.name}, {ID: "unit", Value: c.unit}}
		if c.mappings != nil {
			props = append(props, dashboards.Property{ID: "mappings", Value: c.mappings},
				dashboards.Property{ID: "custom.cellOptions", Value: dashboards.CellOptions{Type: "color-text"}})
		}
		if c.hidden {
			props = append(props, dashboards.Property{ID: "custom.hidden", Value: true})
		}
		overrides = append(overrides, dashboards.Override{Matcher: dashboards.Matcher{ID: "byName", Options: field}, Properties: props})
	}
	transformations := []dashboards.Transformation{
		{ID: "merge", Options: map[string]any{}},
		{ID: "organize", Options: map[string]any{
			"excludeByName": map[string]bool{"Time": true},
			"indexByName":   order,
			"renameByName":  map[string]string{},
		}},
		{ID: "sortBy", Options: map[string]any{"fields": map[string]any{},
			"sort": []map[string]any{{"field": "Value #" + cols[0].ref, "desc": true}}}},
	}
	if limit > 0 {
		transformations = append(transformations, dashboards.Transformation{ID: "limit", Options: map[string]int{"limitField": limit}})
	}
	return dashboards.Panel{
		Type: "table", Title: title, Description: desc, Datasource: ds(), Targets: targets,
		FieldConfig: &dashboards.FieldConfig{
			Defaults: dashboards.FieldDefaults{
				Unit:       unitCount,
				Color:      &dashboards.FieldColor{Mode: "thresholds"},
				Thresholds: baseThresholds(),
				Mappings:   []dashboards.Mapping{},
				Custom: &dashboards.Custom{
					Align:       "auto",
					CellOptions: &dashboards.CellOptions{Type: "auto"},
					Filterable:  ptr(false),
					Inspect:     ptr(false),
				},
			},
			Overrides: overrides,
		},
		Options: &dashboards.Options{
			ShowHeader: ptr(true),
			FrameIndex: ptr(0),
			CellHeight: "sm",
		},
		Transformations: transformations,
	}
}

// Field option tweaks.

// minMax fixes the axis, e.g. 0-100 % for CPU shares.
func minMax(p dashboards.Panel, lo, hi float64) dashboards.Panel {
	p.FieldConfig.Defaults.Min, p.FieldConfig.Defaults.Max = ptr(lo), ptr(hi)
	return p
}

// thresholdLine draws a line at v (dashed when dashed), coloured color.
func thresholdLine(p dashboards.Panel, v float64, color string, dashed bool) dashboards.Panel {
	p.FieldConfig.Defaults.Thresholds = baseThresholds(dashboards.ThresholdStep{Color: color, Value: ptr(v)})
	mode := "line"
	if dashed {
		mode = "dashed"
	}
	p.FieldConfig.Defaults.Custom.ThresholdsStyle = &dashboards.ThresholdsStyle{Mode: mode}
	return p
}

// decimals fixes the number of decimals shown.
func decimals(p dashboards.Panel, n int) dashboards.Panel {
	p.FieldConfig.Defaults.Decimals = ptr(n)
	return p
}

var (
	dashed = dashboards.LineStyle{Fill: "dash", Dash: []int{10, 10}}
	dotted = dashboards.LineStyle{Fill: "dot", Dash: []int{0, 10}}
)

// styleQuery draws one query's series with a line style (and a fixed
// colour, if color is set).
func styleQuery(p dashboards.Panel, ref string, style dashboards.LineStyle, color string) dashboards.Panel {
	props := []dashboards.Property{{ID: "custom.lineStyle", Value: style}}
	if color != "" {
		props = append(props, dashboards.Property{ID: "color", Value: dashboards.FieldColor{Mode: "fixed", FixedColor: color}})
	}
	p.FieldConfig.Overrides = append(p.FieldConfig.Overrides,
		dashboards.Override{Matcher: dashboards.Matcher{ID: "byFrameRefID", Options: ref}, Properties: props})
	return p
}

// colorSeries pins a series (by display name) to a colour.
func colorSeries(p dashboards.Panel, name, color string) dashboards.Panel {
	p.FieldConfig.Overrides = append(p.FieldConfig.Overrides, dashboards.Override{
		Matcher:    dashboards.Matcher{ID: "byName", Options: name},
		Properties: []dashboards.Property{{ID: "color", Value: dashboards.FieldColor{Mode: "fixed", FixedColor: color}}},
	})
	return p
}

// legendTable puts the legend below as a table with the given
// calculations, for panels with many series.
func legendTable(p dashboards.Panel, calcs ...string) dashboards.Panel {
	p.Options.Legend = &dashboards.Legend{ShowLegend: ptr(true), DisplayMode: "table", Placement: "bottom", Calcs: &calcs}
	return p
}

// layout places panels on Grafana's 24-column grid, left to right and
// then down, and numbers them.
type layout struct {
	panels    []dashboards.Panel
	row       int // index in panels of the current row, or -1
	collapsed bool
	x, y, h   int // cursor and the tallest panel of the current line
	rowY      int // y of the current row
	nextID    int
}

func newLayout() *layout { return &layout{row: -1, nextID: 1} }

func (l *layout) newline() {
	if l.x > 0 {
		l.y += l.h
	}
	l.x, l.h = 0, 0
}

// addRow starts a row. A collapsed row keeps its panels inside it; they
// are laid out as they appear when the row is expanded.
func (l *layout) addRow(title string, collapsed bool) {
	l.newline()
	if l.collapsed {
		// The panels of the collapsed row before take no room.
		l.y = l.rowY + 1
	}
	p := dashboards.Panel{ID: l.nextID, Type: "row", Title: title, Collapsed: ptr(collapsed),
		GridPos: dashboards.GridPos{H: 1, W: 24, X: 0, Y: l.y}, Panels: &[]dashboards.Panel{}}
	l.nextID++
	l.panels = append(l.panels, p)
	l.row, l.collapsed, l.rowY = len(l.panels)-1, collapsed, l.y
	l.y++
}

// add places a panel w columns wide and h high.
func (l *layout) add(w, h int, p dashboards.Panel) {
	if l.x+w > 24 {
		l.newline()
	}
	p.ID = l.nextID
	l.nextID++
	p.GridPos = dashboards.GridPos{H: h, W: w, X: l.x, Y: l.y}
	l.x += w
	l.h = max(l.h, h)
	if l.collapsed {
		*l.panels[l.row].Panels = append(*l.panels[l.row].Panels, p)
		return
	}
	l.panels = append(l.panels, p)
}

// datasourceVariable lets one pick the Prometheus that scrapes the
// observers; it defaults to the provisioned one (uid prometheus).
func datasourceVariable() dashboards.Variable {
	return dashboards.Variable{
		Name: "datasource", Label: "Data source", Type: "datasource", Query: "prometheus",
		Description: "The Prometheus that scrapes the thrashscope observers and loads deploy/prometheus/rules/thrashscope.yml.",
		Refresh:     1,
		Current:     &dashboards.Current{Text: "Prometheus", Value: "prometheus"},
		Options:     []dashboards.Current{},
	}
}

// instanceVariable lists the observers Prometheus scrapes.
func instanceVariable(multi bool) dashboards.Variable {
	q := "label_values(thrashscope_build_info, instance)"
	v := dashboards.Variable{
		Name: "instance", Label: "Instance", Type: "query", Datasource: ds(),
		Description: "The observer (host) to show: every scrape target that exports thrashscope_build_info.",
		Query:       q, Definition: q, Refresh: 2, Sort: 1,
		Options: []dashboards.Current{},
	}
	if multi {
		v.Multi, v.IncludeAll = true, true
		v.Current = &dashboards.Current{Selected: true, Text: []string{"All"}, Value: []string{"$__all"}}
	}
	return v
}

func annotation(name, color, expr, title, text, tags string) dashboards.Annotation {
	return dashboards.Annotation{
		Name: name, Datasource: ds(), Enable: true, IconColor: color, Expr: expr,
		// The expressions look back 5s, so a 5s step sees each event once.
		Step:        "5s",
		TitleFormat: title, TextFormat: text, TagKeys: tags,
	}
}

// link is a header link to another thrashscope dashboard, keeping the
// time range and the data source.
func link(title, uid string) dashboards.DashboardLink {
	return dashboards.DashboardLink{Title: title, Type: "link", URL: "/d/" + uid + "?${datasource:queryparam}",
		Icon: "dashboard", Tags: []string{}, KeepTime: true}
}

func dashboard(uid, title, desc string, tags []string, panels []dashboards.Panel, vars []dashboards.Variable, annotations []dashboards.Annotation, links []dashboards.DashboardLink) dashboards.Dashboard {
	return dashboards.Dashboard{
		UID: uid, Title: title, Description: desc, Tags: tags,
		Editable: true, GraphTooltip: 1, Refresh: "5s", SchemaVersion: schemaVersion, Version: 1,
		Time:       dashboards.TimeRange{From: "now-15m", To: "now"},
		Timepicker: dashboards.Timepicker{RefreshIntervals: []string{"5s", "10s", "30s", "1m", "5m"}},
		Timezone:   "browser",
		Links:      links,
		Annotations: dashboards.Annotations{
			List: annotations,
		},
		Templating: dashboards.Templating{List: vars},
		Panels:     panels,
	}
}

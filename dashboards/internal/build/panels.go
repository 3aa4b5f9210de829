// Package build constructs thrashscope's Grafana dashboards with the
// Grafana Foundation SDK's builders, so every panel follows the same
// conventions by construction: the ${datasource} variable, smooth lines, a
// unit, and a description that names its source. go generate ./dashboards
// writes the JSON that Grafana loads.
package build

import (
	"strconv"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"

	"github.com/thrashscope/thrashscope/internal/indicators"
)

// datasource is the dashboards' data source variable: every panel,
// target, annotation and variable query goes through it.
const datasource = "${datasource}"

// schemaVersion is Grafana 10.4's dashboard schema: Grafana 10 and later
// load it without migration, and nothing here needs a later one. The
// SDK's builder writes its own (42, Grafana 12) and has no setter, so
// Dashboard sets the field after building.
const schemaVersion = 39

func ds() common.DataSourceRef {
	return common.DataSourceRef{Type: ptr("prometheus"), Uid: ptr(datasource)}
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

// query is a Prometheus query of a panel.
type query = cog.Builder[variants.Dataquery]

func prom(ref, expr string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().RefId(ref).Datasource(ds()).
		EditorMode(prometheus.QueryEditorModeCode).Expr(expr)
}

// series is a range query drawn as time series.
func series(ref, expr, legend string) query {
	return prom(ref, expr).LegendFormat(legend).Format(prometheus.PromQueryFormatTimeSeries).Range()
}

// instant is a table query: one row per series at the panel's end time.
func instant(ref, expr string) query {
	return prom(ref, expr).Format(prometheus.PromQueryFormatTable).Instant()
}

// buckets is a histogram query for a heatmap: Grafana de-accumulates the
// le buckets itself.
func buckets(expr string) query {
	return prom("A", expr).LegendFormat("{{le}}").Format(prometheus.PromQueryFormatHeatmap).Range()
}

// Panel constructors. Each takes the description first: it is what a
// reader sees on hover, so it is written with the panel, not after. Each
// returns its type's builder, to which a dashboard adds its size
// (Span, Height) and any tweak.

func thresholds(steps ...dashboard.Threshold) *dashboard.ThresholdsConfigBuilder {
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).
		Steps(append([]dashboard.Threshold{{Color: "green"}}, steps...))
}

// at is a threshold step from v on.
func at(v float64, color string) dashboard.Threshold {
	return dashboard.Threshold{Value: &v, Color: color}
}

func colorMode(mode dashboard.FieldColorModeId) *dashboard.FieldColorBuilder {
	return dashboard.NewFieldColorBuilder().Mode(mode)
}

func fixedColor(color string) dashboard.FieldColor {
	return dashboard.FieldColor{Mode: dashboard.FieldColorModeIdFixed, FixedColor: &color}
}

func legend(mode common.LegendDisplayMode, calcs ...string) *common.VizLegendOptionsBuilder {
	if calcs == nil {
		calcs = []string{}
	}
	return common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(mode).
		Placement(common.LegendPlacementBottom).Calcs(calcs)
}

func timeseriesPanel(title, desc, unit string, targets ...query) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().Title(title).Description(desc).Datasource(ds()).Targets(targets).
		Unit(unit).ColorScheme(colorMode(dashboard.FieldColorModeIdPaletteClassic)).Thresholds(thresholds()).
		DrawStyle(common.GraphDrawStyleLine).
		// The paper smoothed its noisy 1 s samples with Bézier curves; a
		// spline through the points does the same.
		LineInterpolation(common.LineInterpolationSmooth).
		LineWidth(1).FillOpacity(10).ShowPoints(common.VisibilityModeNever).
		SpanNulls(common.BoolOrFloat64{Bool: ptr(false)}).
		Legend(legend(common.LegendDisplayModeList)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
}

// stateColors are the detector's states' colours, indexed as
// indicators.StateNames.
var stateColors = [...]string{indicators.Normal: "green", indicators.Monitoring: "yellow", indicators.Thrashing: "red"}

// stateMapping maps the detector's states (0, 1, 2) to their names and
// colours.
func stateMapping() dashboard.ValueMapping {
	m := map[string]dashboard.ValueMappingResult{}
	for i, name := range indicators.StateNames {
		m[strconv.Itoa(i)] = dashboard.ValueMappingResult{Text: ptr(name), Color: ptr(stateColors[i]), Index: ptr(int32(i))}
	}
	return valueMap(m)
}

func valueMap(m map[string]dashboard.ValueMappingResult) dashboard.ValueMapping {
	return dashboard.ValueMapping{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: m}}
}

// stateTimeline shows the detector's states as coloured bands.
func stateTimeline(title, desc string, targets ...query) *statetimeline.PanelBuilder {
	return statetimeline.NewPanelBuilder().Title(title).Description(desc).Datasource(ds()).Targets(targets).
		Unit(unitNone).Min(0).Max(float64(len(indicators.StateNames) - 1)).
		ColorScheme(colorMode(dashboard.FieldColorModeIdThresholds)).Thresholds(thresholds()).
		Mappings([]dashboard.ValueMapping{stateMapping()}).
		LineWidth(0).FillOpacity(80).
		MergeValues(true).ShowValue(common.VisibilityModeAuto).AlignValue(common.TimelineValueAlignmentLeft).RowHeight(0.9).
		Legend(legend(common.LegendDisplayModeList)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeSingle).Sort(common.SortOrderNone))
}

// heatmapPanel shows a Prometheus histogram as it comes: buckets on the y
// axis (yUnit), the rate in each bucket as colour (cellUnit).
func heatmapPanel(title, desc, yUnit, cellUnit string, target query) *heatmap.PanelBuilder {
	return heatmap.NewPanelBuilder().Title(title).Description(desc).Datasource(ds()).WithTarget(target).
		Unit(cellUnit).
		Calculate(false). // the buckets are the histogram's own
		CellGap(1).
		Color(heatmap.NewHeatmapColorOptionsBuilder().Mode(heatmap.HeatmapColorModeScheme).Scheme("Oranges").
			Fill("dark-orange").Scale(heatmap.HeatmapColorScaleExponential).Exponent(0.5).Steps(64)).
		YAxis(heatmap.NewYAxisConfigBuilder().AxisPlacement(common.AxisPlacementLeft).Unit(yUnit)).
		CellValues(heatmap.NewCellValuesBuilder().Unit(cellUnit)).
		RowsFrame(heatmap.NewRowsHeatmapOptionsBuilder().Layout(common.HeatmapCellLayoutLe)).
		FilterValues(heatmap.NewFilterValueRangeBuilder().Le(1e-9)). // hide empty buckets
		ShowValue(common.VisibilityModeNever).
		ShowLegend().
		Tooltip(heatmap.NewHeatmapTooltipBuilder().Mode(common.TooltipDisplayModeSingle).YHistogram(true).ShowColorScale(false)).
		ExemplarsColor("rgba(255,0,255,0.7)")
}

// statPanel shows one value per query, or its legend when textMode is
// name.
func statPanel(title, desc, unit string, textMode common.BigValueTextMode, targets ...query) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Description(desc).Datasource(ds()).Targets(targets).
		Unit(unit).ColorScheme(colorMode(dashboard.FieldColorModeIdThresholds)).Thresholds(thresholds()).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Fields("")).
		TextMode(textMode).ColorMode(common.BigValueColorModeValue).GraphMode(common.BigValueGraphModeNone).
		JustifyMode(common.BigValueJustifyModeAuto).Orientation(common.VizOrientationAuto).
		WideLayout(true).ShowPercentChange(false)
}

// column is one value column of a joined table: the instant query's
// "Value #<ref>" field renamed, with its unit.
type column struct {
	ref, name, unit string
	mappings        []dashboard.ValueMapping
	hidden          bool // a query run for its labels only
}

// tablePanel joins instant queries by their remaining labels (merge),
// drops the time column, sorts by the first value column and keeps the top
// limit.
func tablePanel(title, desc string, keys []string, limit int, cols []column, targets ...query) *table.PanelBuilder {
	order := map[string]int{}
	for i, k := range keys {
		order[k] = i
	}
	p := table.NewPanelBuilder().Title(title).Description(desc).Datasource(ds()).Targets(targets).
		Unit(unitCount).ColorScheme(colorMode(dashboard.FieldColorModeIdThresholds)).Thresholds(thresholds()).
		Align(common.FieldTextAlignmentAuto).
		CellOptions(common.TableCellOptions{TableAutoCellOptions: &common.TableAutoCellOptions{Type: common.TableCellDisplayModeAuto}}).
		Filterable(false).Inspect(false).
		ShowHeader(true).FrameIndex(0).CellHeight(common.TableCellHeightSm).
		// The SDK's default footer has a null reducer, which its own strict
		// decoder refuses; Grafana's is an empty list.
		Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{}))
	for i, c := range cols {
		field := "Value #" + c.ref
		order[field] = len(keys) + i
		props := []dashboard.DynamicConfigValue{{Id: "displayName", Value: c.name}, {Id: "unit", Value: c.unit}}
		if c.mappings != nil {
			props = append(props, dashboard.DynamicConfigValue{Id: "mappings", Value: c.mappings},
				dashboard.DynamicConfigValue{Id: "custom.cellOptions",
					Value: common.TableColorTextCellOptions{Type: common.TableCellDisplayModeColorText}})
		}
		if c.hidden {
			props = append(props, dashboard.DynamicConfigValue{Id: "custom.hidden", Value: true})
		}
		p.OverrideByName(field, props)
	}
	p.WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}}).
		WithTransformation(dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
			"excludeByName": map[string]bool{"Time": true},
			"indexByName":   order,
			"renameByName":  map[string]string{},
		}}).
		WithTransformation(dashboard.DataTransformerConfig{Id: "sortBy", Options: map[string]any{"fields": map[string]any{},
			"sort": []map[string]any{{"field": "Value #" + cols[0].ref, "desc": true}}}})
	if limit > 0 {
		p.WithTransformation(dashboard.DataTransformerConfig{Id: "limit", Options: map[string]int{"limitField": limit}})
	}
	return p
}

// instanceLink is an override linking a table's instance column to that
// host's dashboard.
func instanceLink(title string) []dashboard.DynamicConfigValue {
	return []dashboard.DynamicConfigValue{{Id: "links", Value: []dashboard.DashboardLink{{
		Title: title, Type: dashboard.DashboardLinkTypeLink, Tags: []string{},
		Url: ptr("/d/thrashscope/thrashscope?var-instance=${__value.raw}&${datasource:queryparam}&${__url_time_range}"),
	}}}}
}

// thresholdStyle draws a timeseries' thresholds as lines (dashed when
// dashed).
func thresholdStyle(dashed bool) *common.GraphThresholdsStyleConfigBuilder {
	mode := common.GraphThresholdsStyleModeLine
	if dashed {
		mode = common.GraphThresholdsStyleModeDashed
	}
	return common.NewGraphThresholdsStyleConfigBuilder().Mode(mode)
}

// Line styles for a query's series beside the solid ones.
var (
	dashed = common.LineStyle{Fill: ptr(common.LineStyleFillDash), Dash: []float64{10, 10}}
	dotted = common.LineStyle{Fill: ptr(common.LineStyleFillDot), Dash: []float64{0, 10}}
)

// lineStyle draws a query's series with a line style (and a fixed colour,
// if color is set): an override by query.
func lineStyle(style common.LineStyle, color string) []dashboard.DynamicConfigValue {
	props := []dashboard.DynamicConfigValue{{Id: "custom.lineStyle", Value: style}}
	if color != "" {
		props = append(props, dashboard.DynamicConfigValue{Id: "color", Value: fixedColor(color)})
	}
	return props
}

// colored pins a series (by display name, or a query by ref) to a colour.
func colored(color string) []dashboard.DynamicConfigValue {
	return []dashboard.DynamicConfigValue{{Id: "color", Value: fixedColor(color)}}
}

// row starts a row; a collapsed one holds its panels.
func row(title string, collapsed bool) *dashboard.RowBuilder {
	return dashboard.NewRowBuilder(title).Collapsed(collapsed)
}

// datasourceVariable lets one pick the Prometheus that scrapes the
// observers; it defaults to the provisioned one (uid prometheus).
func datasourceVariable() *dashboard.DatasourceVariableBuilder {
	return dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus").
		Description("The Prometheus that scrapes the thrashscope observers and loads deploy/prometheus/rules/thrashscope.yml.").
		Current(dashboard.VariableOption{Text: text("Prometheus"), Value: text("prometheus")})
}

func text(s string) dashboard.StringOrArrayOfString {
	return dashboard.StringOrArrayOfString{String: &s}
}

// instanceVariable lists the observers Prometheus scrapes.
func instanceVariable(multi bool) *dashboard.QueryVariableBuilder {
	q := "label_values(thrashscope_build_info, instance)"
	v := dashboard.NewQueryVariableBuilder("instance").Label("Instance").Datasource(ds()).
		Description("The observer (host) to show: every scrape target that exports thrashscope_build_info.").
		Query(dashboard.StringOrMap{String: &q}).Definition(q).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc)
	if multi {
		all := dashboard.StringOrArrayOfString{ArrayOfString: []string{"All"}}
		allValue := dashboard.StringOrArrayOfString{ArrayOfString: []string{"$__all"}}
		v.Multi(true).IncludeAll(true).Current(dashboard.VariableOption{Selected: ptr(true), Text: all, Value: allValue})
	}
	return v
}

func annotation(name, color, expr, title, text, tags string) *dashboard.AnnotationQueryBuilder {
	return dashboard.NewAnnotationQueryBuilder().Name(name).Datasource(ds()).Enable(true).IconColor(color).Expr(expr).
		// The expressions look back 5s, so a 5s step sees each event once.
		Step("5s").
		TitleFormat(title).TextFormat(text).TagKeys(tags)
}

// link is a header link to another thrashscope dashboard, keeping the
// time range and the data source.
func link(title, uid string) *dashboard.DashboardLinkBuilder {
	return dashboard.NewDashboardLinkBuilder(title).Type(dashboard.DashboardLinkTypeLink).
		Url("/d/" + uid + "?${datasource:queryparam}").Icon("dashboard").Tags([]string{}).KeepTime(true)
}

// newDashboard starts a dashboard with thrashscope's settings; the caller
// adds variables, panels, annotations and links.
func newDashboard(uid, title, desc string) *dashboard.DashboardBuilder {
	return dashboard.NewDashboardBuilder(title).Uid(uid).Description(desc).Tags([]string{"thrashscope"}).
		Editable().Tooltip(dashboard.DashboardCursorSyncCrosshair).Refresh("5s").Version(1).
		Time("now-15m", "now").Timezone("browser").
		Timepicker(dashboard.NewTimePickerBuilder().RefreshIntervals([]string{"5s", "10s", "30s", "1m", "5m"}))
}

// build builds a dashboard and numbers its panels, rows included, in
// layout order: the builders place panels (Span, Height) but leave ids to
// Grafana, and the tests and links name panels by id.
func build(b *dashboard.DashboardBuilder) (dashboard.Dashboard, error) {
	d, err := b.Build()
	if err != nil {
		return d, err
	}
	d.SchemaVersion = schemaVersion
	id := uint32(0)
	next := func() *uint32 { id++; v := id; return &v }
	for _, p := range d.Panels {
		switch {
		case p.Panel != nil:
			p.Panel.Id = next()
		case p.RowPanel != nil:
			p.RowPanel.Id = *next()
			for i := range p.RowPanel.Panels {
				p.RowPanel.Panels[i].Id = next()
			}
		}
	}
	return d, nil
}

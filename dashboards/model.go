package dashboards

// The Grafana dashboard JSON model (schemaVersion 39), as far as
// thrashscope's dashboards use it. Decode is strict, so a field a dashboard
// uses must be declared here: a misspelt option fails a test instead of
// being ignored by Grafana.

// Dashboard is one Grafana dashboard.
type Dashboard struct {
	ID                   *int            `json:"id"` // null: Grafana assigns it; uid is the stable key
	UID                  string          `json:"uid"`
	Title                string          `json:"title"`
	Description          string          `json:"description"`
	Tags                 []string        `json:"tags"`
	Editable             bool            `json:"editable"`
	FiscalYearStartMonth int             `json:"fiscalYearStartMonth"`
	GraphTooltip         int             `json:"graphTooltip"` // 1: shared crosshair
	LiveNow              bool            `json:"liveNow"`
	Refresh              string          `json:"refresh"`
	SchemaVersion        int             `json:"schemaVersion"`
	Version              int             `json:"version"`
	Time                 TimeRange       `json:"time"`
	Timepicker           Timepicker      `json:"timepicker"`
	Timezone             string          `json:"timezone"`
	WeekStart            string          `json:"weekStart"`
	Links                []DashboardLink `json:"links"`
	Annotations          Annotations     `json:"annotations"`
	Templating           Templating      `json:"templating"`
	Panels               []Panel         `json:"panels"`
}

// TimeRange is the default time range, in Grafana's relative syntax.
type TimeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Timepicker lists the refresh intervals offered.
type Timepicker struct {
	RefreshIntervals []string `json:"refresh_intervals"`
}

// DashboardLink is a link in the dashboard's header.
type DashboardLink struct {
	Title       string   `json:"title"`
	Type        string   `json:"type"` // link, or dashboards (by tag)
	URL         string   `json:"url"`
	Tooltip     string   `json:"tooltip"`
	Icon        string   `json:"icon"`
	Tags        []string `json:"tags"`
	AsDropdown  bool     `json:"asDropdown"`
	IncludeVars bool     `json:"includeVars"`
	KeepTime    bool     `json:"keepTime"`
	TargetBlank bool     `json:"targetBlank"`
}

// DataLink is a link on a panel's values (an override's "links").
type DataLink struct {
	Title       string `json:"title"`
	URL         string `json:"url"`
	TargetBlank bool   `json:"targetBlank,omitempty"`
}

// DatasourceRef names a data source; thrashscope always uses the
// ${datasource} variable so the dashboards import into any Grafana.
type DatasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Annotations holds the dashboard's annotation queries.
type Annotations struct {
	List []Annotation `json:"list"`
}

// Annotation is a Prometheus annotation query: each series' non-zero
// samples become events, consecutive ones (within Step) one region.
type Annotation struct {
	Name            string         `json:"name"`
	Datasource      *DatasourceRef `json:"datasource"`
	Enable          bool           `json:"enable"`
	Hide            bool           `json:"hide"`
	IconColor       string         `json:"iconColor"`
	Expr            string         `json:"expr"`
	Step            string         `json:"step"`
	TitleFormat     string         `json:"titleFormat"`
	TextFormat      string         `json:"textFormat"`
	TagKeys         string         `json:"tagKeys"`
	UseValueForTime bool           `json:"useValueForTime"`
}

// Templating holds the dashboard variables.
type Templating struct {
	List []Variable `json:"list"`
}

// Variable is a dashboard variable of type datasource or query.
type Variable struct {
	Name        string         `json:"name"`
	Label       string         `json:"label"`
	Description string         `json:"description"`
	Type        string         `json:"type"`
	Datasource  *DatasourceRef `json:"datasource,omitempty"`
	Query       string         `json:"query"` // datasource type: the plugin id; query type: label_values(...)
	Definition  string         `json:"definition,omitempty"`
	Regex       string         `json:"regex"`
	Refresh     int            `json:"refresh"` // 1 on load, 2 on time range change
	Sort        int            `json:"sort"`
	Multi       bool           `json:"multi"`
	IncludeAll  bool           `json:"includeAll"`
	AllValue    string         `json:"allValue,omitempty"`
	Hide        int            `json:"hide"`
	SkipURLSync bool           `json:"skipUrlSync"`
	Current     *Current       `json:"current,omitempty"` // none: Grafana picks the first value
	Options     []Current      `json:"options"`
}

// Current is a variable's selected value.
type Current struct {
	Selected bool `json:"selected,omitempty"`
	Text     any  `json:"text,omitempty"`  // string, or a list when multi
	Value    any  `json:"value,omitempty"` // string, or a list when multi
}

// Panel is a panel or a row. A collapsed row holds its panels in Panels.
type Panel struct {
	ID              int              `json:"id"`
	Type            string           `json:"type"`
	Title           string           `json:"title"`
	Description     string           `json:"description,omitempty"`
	GridPos         GridPos          `json:"gridPos"`
	Collapsed       *bool            `json:"collapsed,omitempty"` // rows only
	Panels          *[]Panel         `json:"panels,omitempty"`    // rows only
	Datasource      *DatasourceRef   `json:"datasource,omitempty"`
	Interval        string           `json:"interval,omitempty"`
	MaxDataPoints   int              `json:"maxDataPoints,omitempty"`
	Targets         []Target         `json:"targets,omitempty"`
	FieldConfig     *FieldConfig     `json:"fieldConfig,omitempty"`
	Options         *Options         `json:"options,omitempty"`
	Transformations []Transformation `json:"transformations,omitempty"`
}

// GridPos places a panel on Grafana's 24-column grid.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Target is one Prometheus query of a panel.
type Target struct {
	RefID        string         `json:"refId"`
	Datasource   *DatasourceRef `json:"datasource"`
	EditorMode   string         `json:"editorMode"`
	Expr         string         `json:"expr"`
	LegendFormat string         `json:"legendFormat"`
	Format       string         `json:"format"` // time_series, table, heatmap
	Range        bool           `json:"range"`
	Instant      bool           `json:"instant"`
	Exemplar     bool           `json:"exemplar"`
	Interval     string         `json:"interval,omitempty"`
}

// FieldConfig is a panel's field defaults and overrides.
type FieldConfig struct {
	Defaults  FieldDefaults `json:"defaults"`
	Overrides []Override    `json:"overrides"`
}

// FieldDefaults holds the standard field options.
type FieldDefaults struct {
	Unit       string      `json:"unit"`
	Decimals   *int        `json:"decimals,omitempty"`
	Min        *float64    `json:"min,omitempty"`
	Max        *float64    `json:"max,omitempty"`
	NoValue    string      `json:"noValue,omitempty"`
	Color      *FieldColor `json:"color,omitempty"`
	Thresholds *Thresholds `json:"thresholds,omitempty"`
	Mappings   []Mapping   `json:"mappings"`
	Custom     *Custom     `json:"custom,omitempty"`
}

// FieldColor is a field's colour scheme.
type FieldColor struct {
	Mode       string `json:"mode"` // palette-classic, thresholds, fixed
	FixedColor string `json:"fixedColor,omitempty"`
}

// Thresholds are the colour steps, and lines when Custom.ThresholdsStyle
// asks for them.
type Thresholds struct {
	Mode  string          `json:"mode"`
	Steps []ThresholdStep `json:"steps"`
}

// ThresholdStep starts a colour at Value; the base step has a null value.
type ThresholdStep struct {
	Color string   `json:"color"`
	Value *float64 `json:"value"`
}

// Mapping maps values to text and colour.
type Mapping struct {
	Type    string                   `json:"type"` // value
	Options map[string]MappingResult `json:"options"`
}

// MappingResult is what a mapped value shows.
type MappingResult struct {
	Text  string `json:"text"`
	Color string `json:"color"`
	Index int    `json:"index"`
}

// Custom holds the panel-type-specific field options of the panels
// thrashscope uses (timeseries, state-timeline, heatmap, table).
type Custom struct {
	DrawStyle         string             `json:"drawStyle,omitempty"`
	LineInterpolation string             `json:"lineInterpolation,omitempty"`
	LineWidth         *int               `json:"lineWidth,omitempty"`
	FillOpacity       *int               `json:"fillOpacity,omitempty"`
	GradientMode      string             `json:"gradientMode,omitempty"`
	ShowPoints        string             `json:"showPoints,omitempty"`
	PointSize         int                `json:"pointSize,omitempty"`
	SpanNulls         *bool              `json:"spanNulls,omitempty"`
	InsertNulls       *bool              `json:"insertNulls,omitempty"`
	AxisLabel         string             `json:"axisLabel,omitempty"`
	AxisPlacement     string             `json:"axisPlacement,omitempty"`
	AxisSoftMin       *float64           `json:"axisSoftMin,omitempty"`
	AxisSoftMax       *float64           `json:"axisSoftMax,omitempty"`
	BarAlignment      *int               `json:"barAlignment,omitempty"`
	Stacking          *Stacking          `json:"stacking,omitempty"`
	ThresholdsStyle   *ThresholdsStyle   `json:"thresholdsStyle,omitempty"`
	LineStyle         *LineStyle         `json:"lineStyle,omitempty"`
	ScaleDistribution *ScaleDistribution `json:"scaleDistribution,omitempty"`
	HideFrom          *HideFrom          `json:"hideFrom,omitempty"`
	Align             string             `json:"align,omitempty"`
	CellOptions       *CellOptions       `json:"cellOptions,omitempty"`
	Filterable        *bool              `json:"filterable,omitempty"`
	Inspect           *bool              `json:"inspect,omitempty"`
}

// Stacking of timeseries.
type Stacking struct {
	Mode  string `json:"mode"`
	Group string `json:"group"`
}

// ThresholdsStyle draws thresholds: off, line, dashed, area.
type ThresholdsStyle struct {
	Mode string `json:"mode"`
}

// LineStyle is solid, or dashed with a dash pattern.
type LineStyle struct {
	Fill string `json:"fill"`
	Dash []int  `json:"dash,omitempty"`
}

// ScaleDistribution is linear or log.
type ScaleDistribution struct {
	Type string `json:"type"`
	Log  int    `json:"log,omitempty"`
}

// HideFrom hides a field from the legend, tooltip or visualisation.
type HideFrom struct {
	Legend  bool `json:"legend"`
	Tooltip bool `json:"tooltip"`
	Viz     bool `json:"viz"`
}

// CellOptions is how a table cell is drawn.
type CellOptions struct {
	Type string `json:"type"` // auto, color-background, color-text
	Mode string `json:"mode,omitempty"`
}

// Override changes field options for the fields a matcher selects.
type Override struct {
	Matcher    Matcher    `json:"matcher"`
	Properties []Property `json:"properties"`
}

// Matcher selects fields: byName, byRegexp, byFrameRefID.
type Matcher struct {
	ID      string `json:"id"`
	Options string `json:"options"`
}

// Property is one overridden option; its value's type depends on ID.
type Property struct {
	ID    string `json:"id"`
	Value any    `json:"value"`
}

// Transformation is a data transformation (merge, organize, sortBy, limit).
type Transformation struct {
	ID      string `json:"id"`
	Options any    `json:"options"`
}

// Options holds the panel options of the panel types thrashscope uses.
type Options struct {
	// timeseries, state-timeline, stat, table
	Legend  *Legend  `json:"legend,omitempty"`
	Tooltip *Tooltip `json:"tooltip,omitempty"`
	// state-timeline
	MergeValues *bool    `json:"mergeValues,omitempty"`
	ShowValue   string   `json:"showValue,omitempty"`
	AlignValue  string   `json:"alignValue,omitempty"`
	RowHeight   *float64 `json:"rowHeight,omitempty"`
	// stat
	ReduceOptions *ReduceOptions `json:"reduceOptions,omitempty"`
	TextMode      string         `json:"textMode,omitempty"`
	ColorMode     string         `json:"colorMode,omitempty"`
	GraphMode     string         `json:"graphMode,omitempty"`
	JustifyMode   string         `json:"justifyMode,omitempty"`
	Orientation   string         `json:"orientation,omitempty"`
	WideLayout    *bool          `json:"wideLayout,omitempty"`
	ShowPercent   *bool          `json:"showPercentChange,omitempty"`
	// table
	ShowHeader *bool    `json:"showHeader,omitempty"`
	FrameIndex *int     `json:"frameIndex,omitempty"`
	CellHeight string   `json:"cellHeight,omitempty"`
	SortBy     []SortBy `json:"sortBy,omitempty"`
	// heatmap
	Calculate    *bool           `json:"calculate,omitempty"`
	CellGap      *int            `json:"cellGap,omitempty"`
	Color        *HeatmapColor   `json:"color,omitempty"`
	YAxis        *HeatmapYAxis   `json:"yAxis,omitempty"`
	CellValues   *CellValues     `json:"cellValues,omitempty"`
	RowsFrame    *RowsFrame      `json:"rowsFrame,omitempty"`
	FilterValues *FilterValues   `json:"filterValues,omitempty"`
	Exemplars    *ExemplarConfig `json:"exemplars,omitempty"`
}

// Legend options: timeseries-style (ShowLegend...) or heatmap (Show).
type Legend struct {
	Show        *bool     `json:"show,omitempty"`
	ShowLegend  *bool     `json:"showLegend,omitempty"`
	DisplayMode string    `json:"displayMode,omitempty"`
	Placement   string    `json:"placement,omitempty"`
	Calcs       *[]string `json:"calcs,omitempty"` // required but for the heatmap's legend
}

// Tooltip options.
type Tooltip struct {
	Mode           string `json:"mode"`
	Sort           string `json:"sort,omitempty"`
	YHistogram     *bool  `json:"yHistogram,omitempty"`
	ShowColorScale *bool  `json:"showColorScale,omitempty"`
}

// ReduceOptions picks the value a stat shows.
type ReduceOptions struct {
	Calcs  []string `json:"calcs"`
	Fields string   `json:"fields"`
	Values bool     `json:"values"`
}

// SortBy is a table's initial sort.
type SortBy struct {
	DisplayName string `json:"displayName"`
	Desc        bool   `json:"desc"`
}

// HeatmapColor is the heatmap's colour scheme.
type HeatmapColor struct {
	Mode     string  `json:"mode"`
	Scheme   string  `json:"scheme"`
	Fill     string  `json:"fill"`
	Scale    string  `json:"scale"`
	Exponent float64 `json:"exponent"`
	Steps    int     `json:"steps"`
	Reverse  bool    `json:"reverse"`
}

// HeatmapYAxis configures the bucket axis.
type HeatmapYAxis struct {
	AxisPlacement string `json:"axisPlacement"`
	AxisLabel     string `json:"axisLabel,omitempty"`
	Unit          string `json:"unit"`
	Reverse       bool   `json:"reverse"`
}

// CellValues sets the unit of a heatmap's cells.
type CellValues struct {
	Unit string `json:"unit"`
}

// RowsFrame says how bucket rows line up with their bounds: le for
// Prometheus histograms.
type RowsFrame struct {
	Layout string `json:"layout"`
	Value  string `json:"value,omitempty"`
}

// FilterValues hides cells at or below a value (empty buckets).
type FilterValues struct {
	Le *float64 `json:"le,omitempty"`
}

// ExemplarConfig colours exemplars.
type ExemplarConfig struct {
	Color string `json:"color"`
}

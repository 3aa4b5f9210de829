package dashboards

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// The SDK's strict decoder (v0.0.22) returns its list of errors as an
// error even when the list is empty. Where it decodes into a value of its
// own and keeps that value only if there was no error (a panel or row of
// the dashboard's panels, a query, a panel's options and custom field
// config, a value mapping, a table's cell options), it therefore drops
// every one, silently. Decode uses the SDK's strict decoder of each type,
// and puts those parts together itself. Lists it decodes from [] come back
// nil, which Decode makes [] again: Grafana writes them so.

// registerPlugins tells the SDK each panel type's options and field
// config, which Decode needs to find their types.
var registerPlugins = sync.OnceFunc(plugins.RegisterDefaultPlugins)

// Decode decodes a dashboard with the SDK's strict decoders, which refuse
// a field the SDK's model does not know (in each panel's options and
// custom field config too, by panel type), a value of the wrong type and
// anything after the object, then checks it with the SDK's validation. A
// query that is not a Prometheus query is refused: the dashboards read
// thrashscope's metrics only.
func Decode(b []byte) (Dashboard, error) {
	registerPlugins()
	var d dashboard.Dashboard
	rest, panels, err := split(b, "panels")
	if err != nil {
		return Dashboard{}, fmt.Errorf("decoding dashboard: %w", err)
	}
	if err := failed(d.UnmarshalJSONStrict(rest)); err != nil {
		return Dashboard{}, fmt.Errorf("decoding dashboard: %w", err)
	}
	for i, raw := range panels {
		p, err := decodePanelOrRow(raw)
		if err != nil {
			return Dashboard{}, fmt.Errorf("decoding dashboard: panels[%d]: %w", i, err)
		}
		d.Panels = append(d.Panels, p)
	}
	if err := failed(d.Validate()); err != nil {
		return Dashboard{}, fmt.Errorf("validating dashboard: %w", err)
	}
	return Dashboard{d}, nil
}

// failed is err unless it is the SDK's empty list of errors.
func failed(err error) error {
	var errs cog.BuildErrors
	if errors.As(err, &errs) && len(errs) == 0 {
		return nil
	}
	return err
}

// split takes the array field name out of the JSON object b: b without
// it, and its elements.
func split(b []byte, name string) ([]byte, []json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, nil, err
	}
	var elems []json.RawMessage
	if raw, ok := fields[name]; ok {
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		delete(fields, name)
	}
	rest, err := json.Marshal(fields)
	return rest, elems, err
}

func decodePanelOrRow(raw []byte) (dashboard.PanelOrRowPanel, error) {
	if typeOf(raw) != "row" {
		p, err := decodePanel(raw)
		return dashboard.PanelOrRowPanel{Panel: &p}, err
	}
	rest, panels, err := split(raw, "panels")
	if err != nil {
		return dashboard.PanelOrRowPanel{}, err
	}
	// A row's panels are required, if empty.
	rest, err = with(rest, "panels", []any{})
	if err != nil {
		return dashboard.PanelOrRowPanel{}, err
	}
	r := dashboard.RowPanel{Panels: []dashboard.Panel{}}
	if err := failed(r.UnmarshalJSONStrict(rest)); err != nil {
		return dashboard.PanelOrRowPanel{}, err
	}
	for i, raw := range panels {
		p, err := decodePanel(raw)
		if err != nil {
			return dashboard.PanelOrRowPanel{}, fmt.Errorf("panels[%d]: %w", i, err)
		}
		r.Panels = append(r.Panels, p)
	}
	return dashboard.PanelOrRowPanel{RowPanel: &r}, nil
}

// with sets field name of the JSON object b to v.
func with(b []byte, name string, v any) ([]byte, error) {
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	fields[name] = v
	return json.Marshal(fields)
}

// decodePanel decodes a panel: its own fields with the SDK's strict
// decoder, then its queries, field config and options, each with the
// strict decoder of its type.
func decodePanel(raw []byte) (dashboard.Panel, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return dashboard.Panel{}, err
	}
	targets, fieldConfig, options := fields["targets"], fields["fieldConfig"], fields["options"]
	delete(fields, "targets")
	delete(fields, "fieldConfig")
	delete(fields, "options")
	rest, err := json.Marshal(fields)
	if err != nil {
		return dashboard.Panel{}, err
	}
	var p dashboard.Panel
	if err := failed(p.UnmarshalJSONStrict(rest)); err != nil {
		return p, err
	}
	plugin, ok := cog.ConfigForPanelcfgVariant(p.Type)
	if !ok {
		return p, fmt.Errorf("panel %q: the SDK knows no panel type %q", deref(p.Title), p.Type)
	}
	if targets != nil {
		var raws []json.RawMessage
		if err := json.Unmarshal(targets, &raws); err != nil {
			return p, fmt.Errorf("targets: %w", err)
		}
		for i, raw := range raws {
			q, err := decodeQuery(raw)
			if err != nil {
				return p, fmt.Errorf("targets[%d]: %w", i, err)
			}
			p.Targets = append(p.Targets, q)
		}
	}
	if fieldConfig != nil {
		if p.FieldConfig, err = decodeFieldConfig(fieldConfig, plugin, p.Type); err != nil {
			return p, err
		}
	}
	if options != nil {
		if plugin.OptionsUnmarshaler == nil {
			return p, fmt.Errorf("options: a %s panel has none", p.Type)
		}
		if p.Options, err = strictly(plugin.OptionsUnmarshaler, options); err != nil {
			return p, fmt.Errorf("options: %w", err)
		}
	}
	return p, nil
}

// decodeFieldConfig reads a panel's fieldConfig strictly: its custom
// defaults as the panel type's plugin has them, and its value mappings.
func decodeFieldConfig(fieldConfig json.RawMessage, plugin variants.PanelcfgConfig, panelType string) (*dashboard.FieldConfigSource, error) {
	custom, err := field(fieldConfig, "defaults", "custom")
	if err != nil {
		return nil, fmt.Errorf("fieldConfig: %w", err)
	}
	mappings, err := field(fieldConfig, "defaults", "mappings")
	if err != nil {
		return nil, fmt.Errorf("fieldConfig: %w", err)
	}
	var fc dashboard.FieldConfigSource
	if err := failed(fc.UnmarshalJSONStrict(fieldConfig)); err != nil {
		return nil, fmt.Errorf("fieldConfig: %w", err)
	}
	if fc.Overrides == nil {
		fc.Overrides = []dashboard.DashboardFieldConfigSourceOverrides{}
	}
	if mappings != nil {
		if fc.Defaults.Mappings, err = decodeMappings(mappings); err != nil {
			return nil, fmt.Errorf("fieldConfig.defaults.mappings: %w", err)
		}
	}
	if custom == nil {
		return &fc, nil
	}
	if plugin.FieldConfigUnmarshaler == nil {
		return nil, fmt.Errorf("fieldConfig.defaults.custom: a %s panel has none", panelType)
	}
	if fc.Defaults.Custom, err = strictly(plugin.FieldConfigUnmarshaler, custom); err != nil {
		return nil, fmt.Errorf("fieldConfig.defaults.custom: %w", err)
	}
	if t, ok := fc.Defaults.Custom.(*common.TableFieldOptions); ok {
		cell, err := field(custom, "cellOptions")
		if err == nil && cell != nil {
			t.CellOptions, err = decodeCellOptions(cell)
		}
		if err != nil {
			return nil, fmt.Errorf("fieldConfig.defaults.custom.cellOptions: %w", err)
		}
	}
	return &fc, nil
}

// decodeMappings decodes value mappings strictly, each by its type.
func decodeMappings(raw []byte) ([]dashboard.ValueMapping, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(raw, &raws); err != nil {
		return nil, err
	}
	out := []dashboard.ValueMapping{}
	for i, raw := range raws {
		var m dashboard.ValueMapping
		var dst interface{ UnmarshalJSONStrict([]byte) error }
		switch typeOf(raw) {
		case string(dashboard.MappingTypeValueToText):
			m.ValueMap = &dashboard.ValueMap{}
			dst = m.ValueMap
		case string(dashboard.MappingTypeRangeToText):
			m.RangeMap = &dashboard.RangeMap{}
			dst = m.RangeMap
		case string(dashboard.MappingTypeRegexToText):
			m.RegexMap = &dashboard.RegexMap{}
			dst = m.RegexMap
		case string(dashboard.MappingTypeSpecialValue):
			m.SpecialValueMap = &dashboard.SpecialValueMap{}
			dst = m.SpecialValueMap
		default:
			return nil, fmt.Errorf("[%d]: type %q, want value, range, regex or special", i, typeOf(raw))
		}
		if err := failed(dst.UnmarshalJSONStrict(raw)); err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// decodeCellOptions decodes a table's cell options strictly, by their
// type: the ones thrashscope's tables may use.
func decodeCellOptions(raw []byte) (*common.TableCellOptions, error) {
	var c common.TableCellOptions
	var dst interface{ UnmarshalJSONStrict([]byte) error }
	switch typeOf(raw) {
	case string(common.TableCellDisplayModeAuto):
		c.TableAutoCellOptions = &common.TableAutoCellOptions{}
		dst = c.TableAutoCellOptions
	case string(common.TableCellDisplayModeColorText):
		c.TableColorTextCellOptions = &common.TableColorTextCellOptions{}
		dst = c.TableColorTextCellOptions
	case string(common.TableCellDisplayModeColorBackground):
		c.TableColoredBackgroundCellOptions = &common.TableColoredBackgroundCellOptions{}
		dst = c.TableColoredBackgroundCellOptions
	default:
		return nil, fmt.Errorf("type %q, want auto, color-text or color-background", typeOf(raw))
	}
	return &c, failed(dst.UnmarshalJSONStrict(raw))
}

// typeOf is the type field of a JSON object, "" if it has none.
func typeOf(raw []byte) string {
	var v struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &v)
	return v.Type
}

// decodeQuery decodes a Prometheus query strictly.
func decodeQuery(raw []byte) (*prometheus.Dataquery, error) {
	var ds struct {
		Datasource struct {
			Type string `json:"type"`
		} `json:"datasource"`
	}
	if err := json.Unmarshal(raw, &ds); err != nil {
		return nil, err
	}
	if ds.Datasource.Type != "prometheus" {
		return nil, fmt.Errorf("data source type %q, want prometheus", ds.Datasource.Type)
	}
	q := &prometheus.Dataquery{}
	return q, failed(q.UnmarshalJSONStrict(raw))
}

// field returns the value at path in the JSON object b, nil if absent.
func field(b []byte, path ...string) (json.RawMessage, error) {
	raw := json.RawMessage(b)
	for _, name := range path {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil {
			return nil, err
		}
		if raw = fields[name]; raw == nil {
			return nil, nil
		}
	}
	return raw, nil
}

// strictly decodes raw into the type the SDK's lenient decoder of a panel
// type gives (its options, its custom field config), with that type's
// strict decoder.
func strictly(lenient func([]byte) (any, error), raw []byte) (any, error) {
	v, err := lenient(raw)
	if err != nil {
		return nil, err
	}
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer {
		return nil, fmt.Errorf("the SDK decodes it as %T, which has no strict decoder", v)
	}
	fresh := reflect.New(t.Elem()).Interface()
	s, ok := fresh.(interface{ UnmarshalJSONStrict([]byte) error })
	if !ok {
		return nil, fmt.Errorf("the SDK's %T has no strict decoder", v)
	}
	if err := failed(s.UnmarshalJSONStrict(raw)); err != nil {
		return nil, err
	}
	return fresh, nil
}

package dashboards

import (
	"fmt"
	"slices"
)

// gridWidth is the width of Grafana's grid.
const gridWidth = 24

// layout places panels left to right, top to bottom, and numbers them.
type layout struct {
	panels []*Panel
	nextID int
	y      int    // the top of the current line
	x      int    // the next free column on the current line
	lineH  int    // the height of the current line
	row    *Panel // the collapsed row panels go into; nil: top level
}

// newline starts a new line below the current one.
func (l *layout) newline() {
	l.y += l.lineH
	l.x, l.lineH = 0, 0
}

func (l *layout) id() int {
	l.nextID++
	return l.nextID
}

// section starts an open row titled title.
func (l *layout) section(title string) {
	l.addRow(title, false)
}

// addRow starts a row titled title. A collapsed row (the Pending row, while metrics are
// pending) holds the panels added after it, shown when the row is opened, and must be the
// last row of a board.
func (l *layout) addRow(title string, collapsed bool) {
	l.newline()
	r := &Panel{ID: l.id(), Type: "row", Title: title, GridPos: GridPos{H: 1, W: gridWidth, X: 0, Y: l.y}, Collapsed: &collapsed, Panels: []*Panel{}}
	l.panels = append(l.panels, r)
	if collapsed {
		l.row = r
	}
	l.y++
}

// add places p, w columns wide and h high, after the previous panel, wrapping to a new
// line when it does not fit.
func (l *layout) add(w, h int, p *Panel) {
	if w < 1 || w > gridWidth {
		panic(fmt.Sprintf("dashboards: panel %q: width %d: want 1..%d", p.Title, w, gridWidth))
	}
	if l.x+w > gridWidth {
		l.newline()
	}
	p.ID = l.id()
	p.GridPos = GridPos{H: h, W: w, X: l.x, Y: l.y}
	l.x += w
	l.lineH = max(l.lineH, h)
	if l.row != nil {
		l.row.Panels = append(l.row.Panels, p)
		return
	}
	l.panels = append(l.panels, p)
}

// panel describes one panel; build turns it into Grafana's model.
type panel struct {
	typ, title, desc, unit string
	targets                []Target
	// steps are the thresholds above the base colour; empty: one green base step.
	steps []Step
	base  string // colour of the base step; default "green"
	// thresholdStyle shows thresholds on a time series: "off" (default), "dashed",
	// "line+area", …
	thresholdStyle string
	stack, bars    bool
	// interval is the min interval (Panel.Interval); barInterval for a count per bar.
	interval string
	mappings []any
	links    []DataLink
	min, max *float64
	decimals *int
	// showName makes a stat show its series' legend (a label such as a primary's
	// address) instead of its value, uncoloured.
	showName bool
}

func (s panel) build() *Panel {
	base := s.base
	if base == "" {
		base = "green"
	}
	// Copies throughout: the shared threshold, mapping and link values stay unshared.
	steps := []Step{{Color: base, Value: nil}}
	for _, st := range s.steps {
		steps = append(steps, at(st.Color, *st.Value))
	}
	fd := FieldDefaults{
		Unit:       s.unit,
		Decimals:   s.decimals,
		Min:        s.min,
		Max:        s.max,
		Color:      map[string]any{"mode": "palette-classic"},
		Thresholds: Thresholds{Mode: "absolute", Steps: steps},
		Mappings:   slices.Clone(s.mappings),
		Links:      slices.Clone(s.links),
	}
	if fd.Mappings == nil {
		fd.Mappings = []any{}
	}
	p := &Panel{
		Type:        s.typ,
		Title:       s.title,
		Description: s.desc,
		Datasource:  &DatasourceRef{Type: datasourceRef.Type, UID: datasourceRef.UID},
		FieldConfig: &FieldConfig{Defaults: fd, Overrides: []any{}},
		Interval:    s.interval,
	}
	for i, t := range s.targets {
		t.RefID = string(rune('A' + i))
		t.Datasource = datasourceRef
		t.EditorMode = "code"
		if t.Instant {
			t.Format = "table"
		} else {
			t.Format = "time_series"
		}
		p.Targets = append(p.Targets, t)
	}
	reduce := map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false}
	legend := map[string]any{"displayMode": "list", "placement": "bottom", "showLegend": true, "calcs": []string{}}
	tooltip := map[string]any{"mode": "multi", "sort": "desc"}
	switch s.typ {
	case "timeseries":
		style := s.thresholdStyle
		if style == "" {
			style = "off"
		}
		stacking := "none"
		if s.stack {
			stacking = "normal"
		}
		draw, fill := "line", 10
		if s.bars {
			draw, fill = "bars", 80
		}
		fd := &p.FieldConfig.Defaults
		fd.Custom = map[string]any{
			"drawStyle":         draw,
			"lineWidth":         1,
			"fillOpacity":       fill,
			"gradientMode":      "none",
			"showPoints":        "never",
			"spanNulls":         false,
			"axisPlacement":     "auto",
			"axisLabel":         "",
			"axisSoftMin":       0,
			"stacking":          map[string]any{"mode": stacking, "group": "A"},
			"thresholdsStyle":   map[string]any{"mode": style},
			"lineInterpolation": "linear",
			"hideFrom":          map[string]any{"legend": false, "tooltip": false, "viz": false},
		}
		p.Options = map[string]any{"legend": legend, "tooltip": tooltip}
	case "stat":
		p.FieldConfig.Defaults.Color = map[string]any{"mode": "thresholds"}
		colorMode, graphMode, textMode := "background", "area", "auto"
		if s.showName {
			colorMode, graphMode, textMode = "none", "none", "name"
		}
		p.Options = map[string]any{
			"reduceOptions":     reduce,
			"colorMode":         colorMode,
			"graphMode":         graphMode,
			"justifyMode":       "auto",
			"orientation":       "auto",
			"textMode":          textMode,
			"wideLayout":        true,
			"showPercentChange": false,
		}
	case "bargauge":
		p.FieldConfig.Defaults.Color = map[string]any{"mode": "thresholds"}
		p.Options = map[string]any{
			"reduceOptions": reduce,
			"orientation":   "horizontal",
			"displayMode":   "gradient",
			"valueMode":     "color",
			"namePlacement": "auto",
			"showUnfilled":  true,
			"sizing":        "auto",
			"minVizHeight":  16,
			"minVizWidth":   8,
			"maxVizHeight":  300,
		}
	case "state-timeline":
		p.FieldConfig.Defaults.Color = map[string]any{"mode": "thresholds"}
		p.FieldConfig.Defaults.Custom = map[string]any{
			"fillOpacity": 70,
			"lineWidth":   0,
			"hideFrom":    map[string]any{"legend": false, "tooltip": false, "viz": false},
		}
		p.Options = map[string]any{
			"mergeValues": true,
			"showValue":   "never",
			"alignValue":  "left",
			"rowHeight":   0.9,
			"legend":      legend,
			"tooltip":     map[string]any{"mode": "single", "sort": "none"},
		}
	default:
		panic(fmt.Sprintf("dashboards: panel %q: type %q not built here", s.title, s.typ))
	}
	return p
}

// series is a range query, as a time series panel runs it.
func series(expr, legend string) Target {
	return Target{Expr: expr, LegendFormat: legend, Range: true}
}

// instant is an instant query, for stats and bar gauges.
func instant(expr, legend string) Target {
	return Target{Expr: expr, LegendFormat: legend, Instant: true}
}

// at is a threshold step from v on.
func at(color string, v float64) Step { return Step{Color: color, Value: &v} }

func ptr[T any](v T) *T { return &v }

// hotMapping shows 0 and 1 of hotkeyd_key_hot as words.
func hotMapping() []any {
	return []any{map[string]any{
		"type": "value",
		"options": map[string]any{
			"0": map[string]any{"text": "cool", "color": "green", "index": 0},
			"1": map[string]any{"text": "HOT", "color": "red", "index": 1},
		},
	}}
}

// dashboard returns a board with the fields every hotkeyd board shares.
func dashboard(file, uid, title, desc string, vars []Variable, panels []*Panel) *Dashboard {
	return &Dashboard{
		File:          file,
		UID:           uid,
		Title:         title,
		Description:   desc,
		Tags:          []string{"hotkeyd", "redis"},
		Timezone:      "browser",
		Editable:      true,
		GraphTooltip:  1,
		Refresh:       "10s",
		SchemaVersion: SchemaVersion,
		Version:       1,
		Time:          TimeRange{From: "now-1h", To: "now"},
		Annotations: Annotations{List: []Annotation{{
			BuiltIn:    1,
			Datasource: DatasourceRef{Type: "grafana", UID: "-- Grafana --"},
			Enable:     true,
			Hide:       true,
			IconColor:  "rgba(0, 211, 255, 1)",
			Name:       "Annotations & Alerts",
			Type:       "dashboard",
		}}},
		Links: []Link{{
			Title: "hotkeyd", Type: "dashboards", Tags: []string{"hotkeyd"}, AsDropdown: false,
			IncludeVars: true, KeepTime: true, Icon: "external link", Tooltip: "", URL: "",
		}},
		Templating: Templating{List: vars},
		Panels:     panels,
	}
}

// Template variables. Query variables read label values of agent metrics, so they list
// only what the agents export.
func datasourceVar() Variable {
	return Variable{
		Name: "datasource", Label: "Data source", Type: "datasource", Query: "prometheus",
		Description: "The Prometheus that scrapes the hotkeyd agents.",
		Current:     map[string]any{}, Options: []any{}, Refresh: 1,
	}
}

func queryVar(name, label, desc, query string, multi bool) Variable {
	v := Variable{
		Name: name, Label: label, Description: desc, Type: "query",
		Datasource: &DatasourceRef{Type: datasourceRef.Type, UID: datasourceRef.UID},
		Definition: query,
		Query:      VariableQuery{Query: query, RefID: "PrometheusVariableQueryEditor-VariableQuery"},
		Current:    map[string]any{}, Options: []any{},
		Refresh: 2, // on time range change
		Sort:    1, // alphabetical
	}
	if multi {
		v.Multi, v.IncludeAll, v.AllValue = true, true, ".*"
		v.Current = map[string]any{"selected": true, "text": []string{"All"}, "value": []string{"$__all"}}
	}
	return v
}

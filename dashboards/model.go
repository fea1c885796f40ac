package dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// SchemaVersion is the Grafana dashboard schema version the boards are written in
// (Grafana 11.0). Newer Grafana versions migrate it on load; Grafana 10 loads it as is.
const SchemaVersion = 39

// datasourceRef is the value every panel, target and query variable uses: the dashboard's
// "datasource" variable, of type prometheus.
var datasourceRef = DatasourceRef{Type: "prometheus", UID: "${datasource}"}

// DatasourceRef names a data source.
type DatasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Dashboard is a Grafana dashboard: the fields of Grafana's dashboard JSON model that the
// boards use.
type Dashboard struct {
	// File is the name of the committed JSON under grafana/; not part of the JSON.
	File string `json:"-"`

	ID                   *int        `json:"id"` // always null: Grafana assigns it
	UID                  string      `json:"uid"`
	Title                string      `json:"title"`
	Description          string      `json:"description"`
	Tags                 []string    `json:"tags"`
	Timezone             string      `json:"timezone"`
	Editable             bool        `json:"editable"`
	GraphTooltip         int         `json:"graphTooltip"`
	FiscalYearStartMonth int         `json:"fiscalYearStartMonth"`
	LiveNow              bool        `json:"liveNow"`
	Refresh              string      `json:"refresh"`
	SchemaVersion        int         `json:"schemaVersion"`
	Version              int         `json:"version"`
	Time                 TimeRange   `json:"time"`
	Timepicker           struct{}    `json:"timepicker"`
	Annotations          Annotations `json:"annotations"`
	Links                []Link      `json:"links"`
	Templating           Templating  `json:"templating"`
	Panels               []*Panel    `json:"panels"`
	WeekStart            string      `json:"weekStart"`
}

// TimeRange is the dashboard's default time range.
type TimeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Annotations lists the dashboard's annotation queries.
type Annotations struct {
	List []Annotation `json:"list"`
}

// Annotation is an annotation query; the boards carry only Grafana's built-in one.
type Annotation struct {
	BuiltIn    int           `json:"builtIn"`
	Datasource DatasourceRef `json:"datasource"`
	Enable     bool          `json:"enable"`
	Hide       bool          `json:"hide"`
	IconColor  string        `json:"iconColor"`
	Name       string        `json:"name"`
	Type       string        `json:"type"`
}

// Link is a dashboard link: the other hotkeyd boards, by tag.
type Link struct {
	Title       string   `json:"title"`
	Type        string   `json:"type"`
	Tags        []string `json:"tags"`
	AsDropdown  bool     `json:"asDropdown"`
	IncludeVars bool     `json:"includeVars"`
	KeepTime    bool     `json:"keepTime"`
	TargetBlank bool     `json:"targetBlank"`
	Icon        string   `json:"icon"`
	Tooltip     string   `json:"tooltip"`
	URL         string   `json:"url"`
}

// Templating holds the template variables.
type Templating struct {
	List []Variable `json:"list"`
}

// Variable is a template variable of type datasource or query.
type Variable struct {
	Name        string         `json:"name"`
	Label       string         `json:"label"`
	Description string         `json:"description"`
	Type        string         `json:"type"`
	Datasource  *DatasourceRef `json:"datasource,omitempty"`
	Definition  string         `json:"definition,omitempty"`
	// Query is "prometheus" for a datasource variable, a VariableQuery for a query one.
	Query      any            `json:"query"`
	Current    map[string]any `json:"current"`
	Options    []any          `json:"options"`
	Hide       int            `json:"hide"`
	IncludeAll bool           `json:"includeAll"`
	AllValue   string         `json:"allValue,omitempty"`
	Multi      bool           `json:"multi"`
	Refresh    int            `json:"refresh"`
	Regex      string         `json:"regex"`
	Sort       int            `json:"sort"`
	SkipURL    bool           `json:"skipUrlSync"`
}

// VariableQuery is a Prometheus query variable's query.
type VariableQuery struct {
	Query string `json:"query"`
	RefID string `json:"refId"`
}

// GridPos places a panel on the 24-column grid.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Panel is a Grafana panel, or a row (Type "row").
type Panel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description,omitempty"`
	GridPos     GridPos        `json:"gridPos"`
	Datasource  *DatasourceRef `json:"datasource,omitempty"`
	FieldConfig *FieldConfig   `json:"fieldConfig,omitempty"`
	Options     map[string]any `json:"options,omitempty"`
	Targets     []Target       `json:"targets,omitempty"`
	// Interval is the panel's min interval ("1m"): $__interval, the step between points or
	// bars, is never shorter. Empty: the data source's.
	Interval string `json:"interval,omitempty"`
	// Collapsed and Panels are for rows: a collapsed row holds its panels.
	Collapsed *bool    `json:"collapsed,omitempty"`
	Panels    []*Panel `json:"panels,omitempty"`
}

// FieldConfig sets the unit, colours, thresholds and mappings of a panel's values.
type FieldConfig struct {
	Defaults  FieldDefaults `json:"defaults"`
	Overrides []any         `json:"overrides"`
}

// FieldDefaults are the field settings every series of a panel starts from.
type FieldDefaults struct {
	Unit       string         `json:"unit"`
	Decimals   *int           `json:"decimals,omitempty"`
	Min        *float64       `json:"min,omitempty"`
	Max        *float64       `json:"max,omitempty"`
	Color      map[string]any `json:"color"`
	Thresholds Thresholds     `json:"thresholds"`
	Mappings   []any          `json:"mappings"`
	Links      []DataLink     `json:"links,omitempty"`
	Custom     map[string]any `json:"custom,omitempty"`
}

// Thresholds colour values: the first step has a null value (from minus infinity).
type Thresholds struct {
	Mode  string `json:"mode"`
	Steps []Step `json:"steps"`
}

// Step is one threshold step.
type Step struct {
	Color string   `json:"color"`
	Value *float64 `json:"value"`
}

// DataLink links a value to another board.
type DataLink struct {
	Title string `json:"title"`
	URL   string `json:"url"`
}

// Target is a Prometheus query of a panel.
type Target struct {
	RefID        string        `json:"refId"`
	Datasource   DatasourceRef `json:"datasource"`
	Expr         string        `json:"expr"`
	LegendFormat string        `json:"legendFormat"`
	Instant      bool          `json:"instant"`
	Range        bool          `json:"range"`
	Format       string        `json:"format"`
	EditorMode   string        `json:"editorMode"`
}

// JSON encodes d the way it is committed: indented by two spaces, HTML left unescaped,
// with a final newline.
func (d *Dashboard) JSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, fmt.Errorf("dashboards: encoding %s: %w", d.UID, err)
	}
	return buf.Bytes(), nil
}

package dashboards

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// promtoolPath returns promtool's path, failing t when it is not installed.
func promtoolPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: run ./scripts/test.sh, which installs Debian's prometheus package (/usr/bin/promtool)")
	}
	return p
}

// rules is alerts.yml.
type rules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func TestAlertsPromtool(t *testing.T) {
	promtool := promtoolPath(t)
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestAlertsShape checks what promtool does not: every alert has a severity, a summary
// and a description, a for duration, names only hotkeyd's metrics or up, and is exercised
// by alerts_test.yml; and the alerts the issue asks for exist.
func TestAlertsShape(t *testing.T) {
	var r rules
	readYAML(t, "alerts.yml", &r)
	var tests struct {
		RuleFiles          []string `yaml:"rule_files"`
		EvaluationInterval string   `yaml:"evaluation_interval"`
		Tests              []struct {
			Interval    string `yaml:"interval"`
			InputSeries []struct {
				Series string `yaml:"series"`
				Values string `yaml:"values"`
			} `yaml:"input_series"`
			AlertRuleTest []struct {
				EvalTime  string `yaml:"eval_time"`
				Alertname string `yaml:"alertname"`
				ExpAlerts []struct {
					ExpLabels      map[string]string `yaml:"exp_labels"`
					ExpAnnotations map[string]string `yaml:"exp_annotations"`
				} `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, "alerts_test.yml", &tests)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	var names []string
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			names = append(names, rule.Alert)
			if rule.Alert == "" {
				t.Errorf("group %s: a rule without alert (recording rules belong elsewhere): %q", g.Name, rule.Expr)
				continue
			}
			if s := rule.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q; want warning or critical", rule.Alert, s)
			}
			if rule.Annotations["summary"] == "" || rule.Annotations["description"] == "" {
				t.Errorf("%s: annotations %v; want a summary and a description", rule.Alert, rule.Annotations)
			}
			if rule.For == "" {
				t.Errorf("%s: no for: a single bad scrape would page", rule.Alert)
			}
			for _, n := range metricNames(rule.Expr) {
				if !strings.HasPrefix(n, "hotkeyd_") && prometheusSeries[n] == "" {
					t.Errorf("%s: metric %q is neither hotkeyd's nor up", rule.Alert, n)
				}
			}
			if !fires[rule.Alert] || !quiet[rule.Alert] {
				t.Errorf("%s: alerts_test.yml shows it firing: %v, not firing: %v; want both", rule.Alert, fires[rule.Alert], quiet[rule.Alert])
			}
		}
	}
	for _, want := range []string{"HotkeydSurpriseHotKey", "HotkeydPrimaryOverloaded", "HotkeydSamplesDropped", "HotkeydAgentDown", "HotkeydAgentMissing", "HotkeydIngestLagHigh"} {
		if !slices.Contains(names, want) {
			t.Errorf("alerts.yml has no alert %s", want)
		}
	}
}

// Package dashboards builds hotkeyd's Grafana dashboards and holds the files an operator
// installs next to them: the dashboards as JSON (grafana/*.json), Grafana provisioning
// files (provisioning/), and Prometheus alerting rules with their unit tests (alerts.yml,
// alerts_test.yml).
//
// The JSON is generated from plain Go structs in this package (Boards) and committed, so
// that Grafana loads it without Go; `go generate ./dashboards` rewrites it, and a test
// fails when the committed files differ from what the code generates. There is no Grafana
// SDK dependency: the structs carry the subset of Grafana's dashboard model (schema
// version 39) that the boards use.
//
// The tests prove the boards against the real thing: every panel's PromQL, with its
// template variables substituted, is run through a real Prometheus that scrapes a real
// agent fed with traffic, a hot key, a pinned mitigation and a 3-primary Redis Cluster,
// and must return data; a query naming a metric the agent does not export fails. The
// alerting rules go through `promtool check rules` and `promtool test rules`.
//
// Panels for metrics that the agent does not export yet sit in one collapsed row, named
// in PendingMetrics; docs/dashboards.md describes every board.
//
// Everything here is pure and safe for concurrent use: Boards returns new values on each
// call.
package dashboards

//go:generate go test -run TestGeneratedJSONIsCommitted -update

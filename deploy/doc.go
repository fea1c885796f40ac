// Package deploy holds example deployment files for the hotkeyd agent, and the tests that
// keep them true to the agent: a hardened systemd unit (systemd/hotkeyd.service), a
// Kubernetes Deployment with hotkeyd as a sidecar of an application
// (kubernetes/sidecar.yaml), and a production configuration (hotkeyd.yaml). It has no Go
// API; the README's "Running in production" explains the files.
package deploy

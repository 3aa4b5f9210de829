// Package kubernetes holds the Kubernetes kit: the observer DaemonSet with
// its Service (observer.yaml), a ServiceMonitor, and a PrometheusRule made
// from deploy/prometheus/rules/thrashscope.yml by ./gen, so the rules
// Prometheus loads on a host and on a cluster are one and the same.
package kubernetes

//go:generate go run ./gen

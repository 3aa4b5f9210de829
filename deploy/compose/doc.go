// Package compose holds the Docker Compose kit (compose.yaml, with the
// Prometheus and Alertmanager configs it mounts) and its tests: the file is
// loaded with the compose-spec loader and checked against the repository,
// promtool, amtool and the real observer.
package compose

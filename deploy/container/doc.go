// Package container holds the recipe of the thrashscope image (Dockerfile,
// entrypoint.sh), shared by the compose and kubernetes kits, and its tests:
// the recipe is checked against the repository, and the entrypoint's cgroup
// handling runs in cgroup and mount namespaces of its own.
package container

// Package systemd holds the systemd kit (thrashscope.service) and its tests:
// systemd-analyze verifies and scores the unit, and the real observer runs
// under the unit's capabilities and limits, traced, to show they are enough
// and that each capability is needed.
package systemd

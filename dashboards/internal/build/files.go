package build

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/thrashscope/thrashscope/dashboards"
)

// Files returns every dashboard's JSON by file name, as shipped.
func Files() (map[string][]byte, error) {
	out := map[string][]byte{}
	for name, make := range map[string]func() (dashboard.Dashboard, error){
		"thrashscope.json": Thrashscope,
		"fleet.json":       Fleet,
		"workloads.json":   Workloads,
	} {
		d, err := make()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		b, err := dashboards.Encode(d)
		if err != nil {
			return nil, err
		}
		out[name] = b
	}
	return out, nil
}

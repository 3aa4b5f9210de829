package build

import (
	"github.com/thrashscope/thrashscope/dashboards"
)

// Files returns every dashboard's JSON by file name, as shipped.
func Files() (map[string][]byte, error) {
	out := map[string][]byte{}
	for name, d := range map[string]dashboards.Dashboard{
		"thrashscope.json": Thrashscope(),
		"fleet.json":       Fleet(),
		"workloads.json":   Workloads(),
	} {
		b, err := dashboards.Encode(d)
		if err != nil {
			return nil, err
		}
		out[name] = b
	}
	return out, nil
}

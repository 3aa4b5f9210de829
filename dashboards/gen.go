//go:build ignore

// gen writes the dashboards' JSON from internal/build. Run it with
// go generate ./dashboards after changing a panel.
package main

import (
	"log"
	"os"

	"github.com/thrashscope/thrashscope/dashboards/internal/build"
)

func main() {
	files, err := build.Files()
	if err != nil {
		log.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(name, b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

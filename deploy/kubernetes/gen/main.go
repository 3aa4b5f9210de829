// Command gen writes prometheusrule.yaml from deploy/prometheus/rules/thrashscope.yml.
// go generate runs it in deploy/kubernetes.
package main

import (
	"log"
	"os"

	"github.com/thrashscope/thrashscope/deploy/kubernetes"
)

func main() {
	rules, err := os.ReadFile(kubernetes.RulesFile)
	if err != nil {
		log.Fatal(err)
	}
	out, err := kubernetes.PrometheusRule(rules)
	if err != nil {
		log.Fatalf("%s: %v", kubernetes.RulesFile, err)
	}
	if err := os.WriteFile(kubernetes.PrometheusRuleFile, out, 0o644); err != nil {
		log.Fatal(err)
	}
}

package main

import (
	"io"
	"strings"
	"testing"
)

func TestParseFlagsRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--scale=0"}, "--scale"},
		{[]string{"--scale=2"}, "--scale"},
		{[]string{"--scrape=1ms"}, "--scrape"},
		{[]string{"--processes=-1"}, "--processes"},
		{[]string{"--processes=100000"}, "--processes"},
		{[]string{"--window=1s"}, "--window"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		_, err := parseFlags(append(tc.args, "--node-exporter=/bin/true"), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

func TestCostPercent(t *testing.T) {
	c := cost{Seconds: 60, ObserverCPU: 0.6, ExporterCPU: 0.9}
	if got := c.Percent(c.ObserverCPU); got != 1 {
		t.Errorf("0.6 s of CPU over 60 s = %g %%, want 1", got)
	}
	if got := (cost{}).Percent(1); got != 0 {
		t.Errorf("an empty window = %g %%, want 0", got)
	}
	var b strings.Builder
	writeCost(&b, c)
	if !strings.Contains(b.String(), "ratio            0.67") {
		t.Errorf("no ratio 0.67 in:\n%s", b.String())
	}
}

package metrics

import (
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// pairCache keeps each series' label pairs from one scrape to the next:
// built once while the series is exported, dropped after the first scrape
// that did not use them. Building them (names checked, values made valid
// UTF-8, sorted) was most of a scrape's allocations. Not safe for
// concurrent use: its collector holds a lock through a scrape.
type pairCache[K comparable] struct {
	pairs map[K][]*dto.LabelPair
	used  map[K]bool
}

func newPairCache[K comparable]() pairCache[K] {
	return pairCache[K]{pairs: map[K][]*dto.LabelPair{}, used: map[K]bool{}}
}

// get returns k's pairs, from build on first use; build's names and values
// are taken as given, and sorted by name.
func (c *pairCache[K]) get(k K, build func() []*dto.LabelPair) []*dto.LabelPair {
	c.used[k] = true
	if p, ok := c.pairs[k]; ok {
		return p
	}
	p := build()
	slices.SortFunc(p, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
	c.pairs[k] = p
	return p
}

// sweep ends a scrape: the pairs it did not use are dropped.
func (c *pairCache[K]) sweep() {
	for k := range c.pairs {
		if !c.used[k] {
			delete(c.pairs, k)
		}
	}
	clear(c.used)
}

// nonEmpty leaves out the pairs whose value is empty.
func nonEmpty(p []*dto.LabelPair) []*dto.LabelPair {
	return slices.DeleteFunc(p, func(l *dto.LabelPair) bool { return l.GetValue() == "" })
}

// pair is one label pair, its value made valid UTF-8.
func pair(name, value string) *dto.LabelPair {
	return &dto.LabelPair{Name: proto.String(name), Value: proto.String(Label(value))}
}

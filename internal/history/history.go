// Package history is the observer's in-memory sample store: the last 15
// minutes of host figures, one compact Point per sample, and the latest
// table of tracked processes with their rates. It is a sink of the
// pipeline; the live page reads it.
package history

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/row"
)

// Span is how far back the store reaches at the sample interval.
const Span = 15 * time.Minute

// MaxPoints bounds the ring whatever the interval: at the 100 ms minimum
// the store keeps the last 6 minutes rather than 9,000 points.
const MaxPoints = 3600

// Point is one sample's host figures. Rates are float32: seven significant
// digits are more than a figure shows, and they halve the ring's size.
type Point struct {
	UnixMilli int64 // the sample's time
	// host is the host's indicators (row.Host, the row samples.csv
	// records too) in row.HostColumns' order, as float32: a ring of
	// MaxPoints stays within 200 KiB.
	host [row.HostFields]float32
	// WorkingSetRatio is NaN when the detector had none.
	WorkingSetRatio float32
	HighFault       uint16
	// State is the detector's (0 normal, 1 monitoring, 2 thrashing), or
	// -1 when the detector did not run.
	State int8
	// HasPSI is false on a kernel without PSI.
	HasPSI bool
}

// Time is the sample's time.
func (p Point) Time() time.Time { return time.UnixMilli(p.UnixMilli) }

// Host is the sample's host indicators.
func (p Point) Host() row.Host {
	var h row.Host
	for i, c := range row.HostColumns {
		*c.Field(&h) = float64(p.host[i])
	}
	return h
}

// SetHost sets the sample's host indicators.
func (p *Point) SetHost(h row.Host) {
	for i, c := range row.HostColumns {
		p.host[i] = float32(*c.Field(&h))
	}
}

// Peak raises each of p's figures to q's where q's is higher: the host's
// indicators, the detector's state, the high-fault count and the
// working-set ratio (a NaN ratio, none, gives way to any).
func (p *Point) Peak(q Point) {
	for i := range p.host {
		p.host[i] = max(p.host[i], q.host[i])
	}
	p.State, p.HighFault = max(p.State, q.State), max(p.HighFault, q.HighFault)
	if q.WorkingSetRatio > p.WorkingSetRatio || p.WorkingSetRatio != p.WorkingSetRatio {
		p.WorkingSetRatio = q.WorkingSetRatio
	}
}

// PointOf reduces a tick to its Point. Its reading must have rates.
func PointOf(t *pipeline.Tick) Point {
	s := t.Reading
	p := Point{
		UnixMilli:       s.Time.UnixMilli(),
		HasPSI:          s.Pressure != nil,
		WorkingSetRatio: float32(math.NaN()),
		State:           -1,
	}
	p.SetHost(s.Rates.Host)
	if v := t.Verdict; v != nil {
		p.State = int8(v.State)
		p.HighFault = uint16(min(v.HighFaultCount, math.MaxUint16))
		if v.HasWorkingSetRatio {
			p.WorkingSetRatio = float32(v.WorkingSetRatio)
		}
	}
	return p
}

// Capacity is the ring size for a sample interval: Span's worth, within
// [2, MaxPoints].
func Capacity(interval time.Duration) int {
	if interval <= 0 {
		interval = time.Second
	}
	n := int((Span + interval - 1) / interval)
	return min(max(n, 2), MaxPoints)
}

// Store is a fixed-size ring of Points plus the latest process table. It
// is safe for one writer and any number of readers.
type Store struct {
	mu    sync.RWMutex
	ring  []Point
	next  int // where the next point goes
	n     int // points held
	added uint64
	top   Top
}

// New returns a Store sized for the sample interval.
func New(interval time.Duration) *Store {
	return &Store{ring: make([]Point, Capacity(interval))}
}

// Cap is how many points the store keeps.
func (s *Store) Cap() int { return len(s.ring) }

// Add appends a point, overwriting the oldest once the ring is full.
func (s *Store) Add(p Point) {
	s.mu.Lock()
	s.add(p)
	s.mu.Unlock()
}

func (s *Store) add(p Point) {
	s.ring[s.next] = p
	s.next = (s.next + 1) % len(s.ring)
	s.n = min(s.n+1, len(s.ring))
	s.added++
}

// Observe records a tick whose reading has rates: its Point and its
// process table. It makes the store a sink of the pipeline.
func (s *Store) Observe(_, cur *pipeline.Tick) {
	if !cur.Reading.HasRates {
		return
	}
	top, p := TopOf(cur), PointOf(cur)
	s.mu.Lock()
	s.top = top
	s.add(p)
	s.mu.Unlock()
}

// Len is how many points the store holds.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.n
}

// Generation counts the points ever added: it changes exactly when the
// store does, so readers can cache what they derive from it.
func (s *Store) Generation() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.added
}

// Window returns a copy of the points no older than d before the newest,
// oldest first; d <= 0 returns all of them.
func (s *Store) Window(d time.Duration) []Point {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.n == 0 {
		return nil
	}
	first := (s.next - s.n + len(s.ring)) % len(s.ring)
	newest := s.ring[(s.next-1+len(s.ring))%len(s.ring)].UnixMilli
	skip := 0
	if d > 0 {
		skip = searchFrom(s.ring, first, s.n, newest-d.Milliseconds())
	}
	out := make([]Point, s.n-skip)
	for i := range out {
		out[i] = s.ring[(first+skip+i)%len(s.ring)]
	}
	return out
}

// searchFrom finds the first of the n points starting at ring[first] whose
// time is at or after from: the sampler adds them in time order, so a binary
// search over the ring's logical order does.
func searchFrom(ring []Point, first, n int, from int64) int {
	lo, hi := 0, n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if ring[(first+mid)%len(ring)].UnixMilli < from {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// Ends returns the oldest and the newest point, and false when the store
// is empty: what a summary needs, without copying the window.
func (s *Store) Ends() (oldest, newest Point, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.n == 0 {
		return Point{}, Point{}, false
	}
	return s.ring[(s.next-s.n+len(s.ring))%len(s.ring)], s.ring[(s.next-1+len(s.ring))%len(s.ring)], true
}

// Top returns the latest process table (a copy).
func (s *Store) Top() Top {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t := s.top
	t.Rows, t.Workloads = slices.Clone(t.Rows), slices.Clone(t.Workloads)
	return t
}

package run

// Shape is what a run is made of, which decides how it is carried out,
// when it ends and what its record holds. Each shape is a row of shapes
// below: how a spec comes to have it, and its Traits, which are all that
// a reader of a run (its progress, its record, its reports) asks. The
// runner carries each out by a strategy of its own (runner's shape_*.go).
type Shape int

const (
	// ShapeTimed: consumers on the paper's schedule, each ending at its
	// planned t_f.
	ShapeTimed Shape = iota
	// ShapeWork: consumers on the schedule, each ending after its write
	// cycles (Cycles), so the run has a makespan.
	ShapeWork
	// ShapeFill: one process filling chunks up to a demand (no schedule).
	ShapeFill
)

// Traits is what a run's shape means to whoever reads the run: data kept
// with the shape, so that a reader asks what a run has, never which shape
// it is, and a new shape with traits of old ones changes no reader.
type Traits struct {
	// Scheduled: the consumers follow the schedule (Slot); each demands
	// its S from its actual start to its actual end, and its end is late
	// or not against its planned t_f.
	Scheduled bool
	// Work: each consumer ends after its write cycles, with a run time,
	// a slowdown against one consumer run alone first, and the run a
	// makespan; lateness against t_f is no finding.
	Work bool
	// Chunks: one process fills chunks up to a demand; the demand and the
	// progress count chunks, and the record keeps the fill table.
	Chunks bool
}

// shapeRow is one shape: how a spec comes to have it, and its traits.
type shapeRow struct {
	shape  Shape
	traits Traits
	picks  func(r Resolved, preset Preset) bool
}

// shapes are the shapes, in the order a spec is matched against them: the
// first that picks a spec is its shape.
var shapes = []shapeRow{
	{ShapeFill, Traits{Chunks: true}, func(_ Resolved, p Preset) bool { return p.Shape == ShapeFill }},
	{ShapeWork, Traits{Scheduled: true, Work: true}, func(r Resolved, _ Preset) bool { return r.Cycles > 0 }},
	{ShapeTimed, Traits{Scheduled: true}, func(Resolved, Preset) bool { return true }},
}

// row is the spec's shape's row.
func (r Resolved) row() shapeRow {
	p, _ := presetByName(r.Preset)
	for _, s := range shapes {
		if s.picks(r, p) {
			return s
		}
	}
	return shapes[len(shapes)-1]
}

// Shape is the run's shape: its preset's, or by its cycles. Only run and
// the runner's strategies ask it; everyone else reads Traits.
func (r Resolved) Shape() Shape { return r.row().shape }

// Traits are what the run's shape means to whoever reads the run.
func (r Resolved) Traits() Traits { return r.row().traits }

// Shapes lists every shape, for those that keep one thing a shape (the
// runner's strategies) to check they miss none.
func Shapes() []Shape {
	var all []Shape
	for _, s := range shapes {
		all = append(all, s.shape)
	}
	return all
}

package policy

// none is Linux as it is: no action, ever.
type none struct{}

func (none) Step(Tick) []Action { return nil }

func init() {
	register(Registration{Name: None, Summary: "Linux as it is", New: func() Policy { return none{} }})
}

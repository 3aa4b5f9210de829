package run

// PresetFill is seed 002's progressive fill, which loadgen fill runs.
const PresetFill = "fill"

// For the fill, Consumers is the number of chunks and SizeBytes the chunk
// size, so the demand is Consumers × SizeBytes as for the others.
func init() {
	s := paperSpec(PresetFill, 0, 0, 0)
	s.Consumers, s.SizeBytes, s.Repeats, s.LeadIn = 12, 128*mib, 5, 0
	registerPreset(Preset{Name: PresetFill, Source: "seed 002", Shape: ShapeFill, Spec: s,
		Description: "Seed 002's swap overhead: fill 128 MiB chunks up to 1.5 GiB in a 1 GiB cgroup, keeping earlier chunks hot; 5 repeats."})
}

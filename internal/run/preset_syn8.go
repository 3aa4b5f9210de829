package run

import "time"

// Reuven and Wiseman (2006)'s SYN8, of fixed work.
func init() {
	s := paperSpec("syn8", 10_000, 10*time.Millisecond, 100*time.Millisecond)
	s.Consumers, s.SizeBytes, s.MemoryLimitBytes = 17, 8*mb, 128*mib
	s.LeadIn, s.Cycles = Duration(time.Second), 1_000
	registerPreset(Preset{Name: "syn8", Source: "Reuven and Wiseman, 2006", Spec: s,
		Description: "Reuven and Wiseman (2006) SYN8: 17 processes of 8 MB in random access (136 MB, the top of its range) in 128 MiB, started 100 ms apart, 1,000 write cycles each (about 10 s alone)."})
}

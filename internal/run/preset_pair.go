package run

import "time"

// Jiang and Zhang (2001)'s LU + LU, TPF's own test, of fixed work.
func init() {
	s := paperSpec("pair", 10_000, 10*time.Millisecond, time.Second)
	s.Consumers, s.SizeBytes, s.MemoryLimitBytes = 2, 200*mb, 256*mib
	s.LeadIn, s.Cycles = Duration(time.Second), 1_500
	registerPreset(Preset{Name: "pair", Source: "Jiang and Zhang, 2001", Spec: s,
		Description: "Jiang and Zhang (2001) LU + LU: two processes of 200 MB in random access in 256 MiB (33 % short of their demand; TPF's was 35 %), 1,500 write cycles each (about 16 s alone)."})
}

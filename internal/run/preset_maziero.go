package run

import "time"

// Maziero et al. (2013)'s experiments e1-e4 and its stability run.
func init() {
	paper := func(name string, w int, sleep, interval time.Duration, desc string) {
		registerPreset(Preset{Name: name, Source: "Maziero et al., 2013", Description: desc, Spec: paperSpec(name, w, sleep, interval)})
	}
	paper("e1", 1_000, 100*time.Millisecond, 30*time.Second, "Maziero et al. (2013) e1: W=1,000, t_s=100 ms, t_c=30 s; 25 × 100 MB in 1 GiB, 1510 s.")
	paper("e2", 10_000, 100*time.Millisecond, 30*time.Second, "Maziero et al. (2013) e2: W=10,000, t_s=100 ms, t_c=30 s; 25 × 100 MB in 1 GiB, 1510 s.")
	paper("e3", 10_000, time.Second, 30*time.Second, "Maziero et al. (2013) e3: W=10,000, t_s=1 s, t_c=30 s; 25 × 100 MB in 1 GiB, 1510 s.")
	paper("e4", 10_000, 100*time.Millisecond, time.Second, "Maziero et al. (2013) e4: W=10,000, t_s=100 ms, t_c=1 s; 25 × 100 MB in 1 GiB, 60 s.")
	paper("fig12", 10_000, 100*time.Millisecond, 10*time.Second, "Maziero et al. (2013) Fig 12, the stability run: W=10,000, t_s=100 ms, t_c=10 s; 25 × 100 MB in 1 GiB, 510 s. Run it three times and overlay them with observer report.")
}

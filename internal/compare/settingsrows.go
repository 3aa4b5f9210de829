package compare

import "fmt"

// SettingsFindings are the README's rows of what the settings comparisons
// under docs/settings found, each against the claim it speaks to.
var SettingsFindings = []SettingsFinding{
	{
		Finding: "e4 at scale 0.1, `fill: random` (incompressible), this host (6.18): disk swap, zram, zswap (`e4-random`)",
		Claim:   "seed 002: compression hides swapping unless the data is incompressible",
		Measure: incompressible,
	},
}

// incompressible: zram's ratio on random pages, what it paged against the
// disk, and how zswap's runs ended.
func incompressible(cs Comparisons) (string, string, error) {
	const dir = "e4-random"
	ratio, _, _, err := cs.mean(dir, "swap=zram", "zram_compression_ratio")
	if err != nil {
		return "", "", err
	}
	stored, _, _, _ := cs.mean(dir, "swap=zram", "zram_orig_data_bytes")
	swapIns, _, err := cs.contrast(dir, "swap=disk", "swap=zram", "swap-ins")
	if err != nil {
		return "", "", err
	}
	failed, runs, err := cs.failed(dir, "swap=zswap")
	if err != nil {
		return "", "", err
	}
	pool, _, _, _ := cs.mean(dir, "swap=zswap", "zswapped_bytes")
	if failed > 0 {
		pool = meanOfAll(cs, dir, "swap=zswap", "zswapped_bytes")
	}
	shows := fmt.Sprintf("zram held %.0f MiB at %.2f× (outside the run's limit); %s; zswap kept %.0f MiB uncompressed in a pool the run's cgroup pays for, and %d of its %d runs stalled at the limit (consumers parked, failed at the plan's end + 60 s)",
		stored/(1<<20), ratio, swapIns, pool/(1<<20), failed, runs)
	agrees := "**no**: compression hid nothing"
	if ratio < 1.1 {
		agrees = "**yes**: compression hid nothing"
	}
	return shows, agrees, nil
}

// meanOfAll is the measure's mean over an arm's runs, completed or not.
func meanOfAll(cs Comparisons, dir, arm, measure string) float64 {
	rs, err := cs.arm(dir, arm)
	if err != nil {
		return 0
	}
	var sum float64
	var n int
	for _, r := range rs {
		if v, ok := r.Cost[measure]; ok {
			sum += v
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

package compare

import (
	"fmt"
	"strings"
)

// SettingsFindings are the README's rows of what the settings comparisons
// under docs/settings found, each against the claim it speaks to.
var SettingsFindings = []SettingsFinding{
	{
		Finding: "e4 at scale 0.1, `fill: random` (incompressible), this host (6.18): disk swap, zram, zswap (`e4-random`)",
		Claim:   "seed 002: compression hides swapping unless the data is incompressible",
		Measure: incompressible,
	},
	{
		Finding: "the same with `fill: zero` (compressible) (`e4-zero`)",
		Claim:   "seed 002: compression hides swapping",
		Measure: compressible,
	},
	{
		Finding: "zswap against the disk, e4 at 0.1 with `fill: zero` (`e4-zero`)",
		Claim:   "zswap's posting: 76 % less I/O on a kernel build",
		Measure: zswapIO,
	},
	{
		Finding: "SYN8 at 1.49× (25 × 8 MB in 128 MiB), disk against zswap, under each of its policies (`syn8-1.5`)",
		Claim:   "zswap's posting: less I/O, and faster where the swap device is slow",
		Measure: syn8Zswap,
	},
	{
		Finding: "e4 at 0.1 in the 6.12 guest (pure cgroup v2, qemu TCG): MGLRU on, off, and on with `min_ttl_ms` 1000 (`mglru-6.12`)",
		Claim:   "MGLRU's patch set: about half the full PSI, and 51 % less kswapd CPU",
		Measure: mglru,
	},
	{
		Finding: "zswap in the same guest (`mglru-6.12`)",
		Claim:   "zswap's posting: 76 % less I/O",
		Measure: guestZswap,
	},
}

// mglruDir is the guest's comparison.
const mglruDir = "mglru-6.12"

// mglru: the run cgroup's full stall with MGLRU off and on, and what
// min_ttl_ms did.
func mglru(cs Comparisons) (string, string, error) {
	psi, way, err := cs.contrast(mglruDir, "mglru=off", "mglru=on", "PSI full")
	if err != nil {
		return "", "", err
	}
	late, _, err := cs.contrast(mglruDir, "mglru=off", "mglru=on", "mean lateness")
	if err != nil {
		return "", "", err
	}
	ttl, _, err := cs.contrast(mglruDir, "mglru=on", "mglru=on mglru_min_ttl_ms=1000", "PSI full")
	if err != nil {
		return "", "", err
	}
	kills, _, _, _ := cs.mean(mglruDir, "mglru=on mglru_min_ttl_ms=1000", "OOM kills")
	shows := fmt.Sprintf("%s; %s; with min_ttl_ms 1000 %s, %.0f OOM kills a run (the thrash is the cgroup's limit, which min_ttl_ms does not guard: it acts in the host's reclaim); kswapd's CPU not measured (the cgroup's reclaim runs in the consumers)", psi, late, strings.TrimPrefix(ttl, "PSI full: "), kills)
	agrees := map[int]string{-1: "**yes**: less full stall", 0: "**no**: within the runs' spread", 1: "**no**: more full stall"}[way]
	return shows, agrees, nil
}

// guestZswap: how zswap's runs ended on pure cgroup v2, and its I/O.
func guestZswap(cs Comparisons) (string, string, error) {
	failed, runs, err := cs.failed(mglruDir, "swap=zswap")
	if err != nil {
		return "", "", err
	}
	io, way, err := cs.contrast(mglruDir, "mglru=on", "swap=zswap", "swap_disk_written_bytes")
	if err != nil {
		return "", "", err
	}
	psi, _, err := cs.contrast(mglruDir, "mglru=on", "swap=zswap", "PSI full")
	if err != nil {
		return "", "", err
	}
	stored, _, _, _ := cs.mean(mglruDir, "swap=zswap", "zswap_stored_pages")
	shows := fmt.Sprintf("zswap stored %.0f pages; %d of %d runs did not complete; %s; %s (against MGLRU on, the guest's default, on the disk)", stored, failed, runs, io, psi)
	agrees := "**no**"
	switch {
	case stored == 0:
		agrees = "**no**: it stored no page, and every one went to the disk"
	case way < 0:
		agrees = "in I/O, **yes**"
	}
	return shows, agrees, nil
}

// syn8Zswap: SYN8's makespan on the disk and under zswap under each of
// the comparison's policies, and the disk writes under the last (the one
// that pages out).
func syn8Zswap(cs Comparisons) (string, string, error) {
	const dir = "syn8-1.5"
	c, ok := cs[dir]
	if !ok || len(c.Policies) == 0 {
		return "", "", fmt.Errorf("no comparison %s", dir)
	}
	var parts, verdicts []string
	for _, pol := range c.Policies {
		text, way, err := cs.contrast(dir, pol+", swap=disk", pol+", swap=zswap", "makespan")
		if err != nil {
			return "", "", err
		}
		failed, runs, err := cs.failed(dir, pol+", swap=zswap")
		if err != nil {
			return "", "", err
		}
		parts = append(parts, fmt.Sprintf("%s: %s, %d of %d zswap runs unfinished", pol, text, failed, runs))
		switch {
		case failed == runs:
			verdicts = append(verdicts, "under "+pol+" **no**: it never finished")
		case way < 0:
			verdicts = append(verdicts, "under "+pol+" **yes**")
		case way > 0:
			verdicts = append(verdicts, "under "+pol+" **no**: slower")
		default:
			verdicts = append(verdicts, "under "+pol+" within the runs' spread")
		}
	}
	last := c.Policies[len(c.Policies)-1]
	io, _, err := cs.contrast(dir, last+", swap=disk", last+", swap=zswap", "swap_disk_written_bytes")
	if err != nil {
		return "", "", err
	}
	return strings.Join(append(parts, last+"'s "+io), "; "), strings.Join(verdicts, "; "), nil
}

// compressible: zram's ratio on zero pages, and what reached the disk.
func compressible(cs Comparisons) (string, string, error) {
	const dir = "e4-zero"
	ratio, _, _, err := cs.mean(dir, "swap=zram", "zram_compression_ratio")
	if err != nil {
		return "", "", err
	}
	stored, _, _, _ := cs.mean(dir, "swap=zram", "zram_orig_data_bytes")
	used, _, _, _ := cs.mean(dir, "swap=zram", "zram_mem_used_bytes")
	written, way, err := cs.contrast(dir, "swap=disk", "swap=zram", "swap_disk_written_bytes")
	if err != nil {
		return "", "", err
	}
	psi, psiWay, err := cs.contrast(dir, "swap=disk", "swap=zram", "PSI full")
	if err != nil {
		return "", "", err
	}
	shows := fmt.Sprintf("zram held %.0f MiB in %.1f MiB (%.1f×); %s; %s", stored/(1<<20), used/(1<<20), ratio, written, psi)
	agrees := "**no**"
	if ratio > 2 && way < 0 {
		agrees = "**yes**: the disk barely sees the thrash"
		switch psiWay {
		case 0:
			agrees += ", while the consumers stall as long"
		case -1:
			agrees += ", and the consumers stall less"
		}
	}
	return shows, agrees, nil
}

// zswapIO: what reached the disk under zswap against the disk alone, and
// how zswap's runs ended.
func zswapIO(cs Comparisons) (string, string, error) {
	const dir = "e4-zero"
	var parts []string
	less := 0.0
	for _, m := range []string{"swap_disk_written_bytes", "swap_disk_read_bytes"} {
		text, _, err := cs.contrast(dir, "swap=disk", "swap=zswap", m)
		if err != nil {
			return "", "", err
		}
		parts = append(parts, text)
	}
	d, _, _, _ := cs.mean(dir, "swap=disk", "swap_disk_written_bytes")
	dr, _, _, _ := cs.mean(dir, "swap=disk", "swap_disk_read_bytes")
	z, _, _, _ := cs.mean(dir, "swap=zswap", "swap_disk_written_bytes")
	zr, _, _, _ := cs.mean(dir, "swap=zswap", "swap_disk_read_bytes")
	less = 1 - (z+zr)/(d+dr)
	failed, runs, err := cs.failed(dir, "swap=zswap")
	if err != nil {
		return "", "", err
	}
	shows := fmt.Sprintf("%s; %s: %.1f %% less I/O; but %d of its %d runs stalled at the limit", parts[0], parts[1], 100*less, failed, runs)
	agrees := "**no**"
	if less >= 0.76 {
		agrees = "in I/O, **yes**"
		if failed > 0 {
			agrees += "; in progress, **no**"
		}
	}
	return shows, agrees, nil
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
	shows := fmt.Sprintf("zram held %.0f MiB at %.2f× (outside the run's limit); %s; zswap kept %.0f MiB uncompressed in a pool the run's cgroup pays for, and %d of its %d runs stalled at the limit (consumers parked, failed at the plan's end + 60 s)",
		stored/(1<<20), ratio, swapIns, pool/(1<<20), failed, runs)
	agrees := "**no**: compression hid nothing"
	if ratio < 1.1 {
		agrees = "**yes**: compression hid nothing"
	}
	return shows, agrees, nil
}

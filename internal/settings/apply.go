package settings

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/thrashscope/thrashscope/internal/kernfile"
)

// Record is what a run asked of the settings and what the kernel had: each
// file's value before the run, read back once written, and after the run's
// end; the swap areas while it ran; and the cost the kernel shows of a
// compressed swap.
type Record struct {
	Asked Asked  `json:"asked"`
	Files []Seen `json:"files,omitempty"`
	// SwapAreas are /proc/swaps' areas while the run ran: name, priority.
	SwapAreas []string `json:"swap_areas,omitempty"`
	// Zram is the zram device the run swapped to, reset after it.
	Zram string `json:"zram,omitempty"`
	// Compressor is the compressed swap's algorithm in force: the zram
	// device's, or zswap's.
	Compressor string `json:"compressor,omitempty"`
	// Cost is what the compressed swap held and did over the run (see
	// CostNames), as the kernel counts it.
	Cost map[string]float64 `json:"cost,omitempty"`
	// Restored says every host-wide file was given its value back.
	Restored bool `json:"restored"`
	// RestoreError is why one was not (the journal keeps it for the next
	// thrashscope process to try again).
	RestoreError string `json:"restore_error,omitempty"`
	// Kept are the host-wide files (or the zram device) changed by someone
	// else while the run ran, which the restore left as they were.
	Kept []string `json:"kept,omitempty"`
}

// Seen is one kernel file a setting wrote.
type Seen struct {
	Setting string `json:"setting"`
	File    string `json:"file"`
	// Host: a host-wide file; otherwise the run cgroup's, gone with it.
	Host   bool   `json:"host"`
	Wrote  string `json:"wrote"`
	Before string `json:"before"`
	During string `json:"during"`
	After  string `json:"after,omitempty"`
}

// Target is the run the settings are applied for.
type Target struct {
	// Cgroup is the run's memory cgroup, V2 whether it is on cgroup v2.
	Cgroup string
	V2     bool
	// SwapBytes is what the run could put in swap at most: a zram device
	// is sized to it.
	SwapBytes int64
	// Root is where the host's files are ("" is /), for tests.
	Root string
}

// applier puts one run under its settings.
type applier struct {
	j   *Journal
	t   Target
	rec *Record
	// vmstat is /proc/vmstat's zswap counters as the run began.
	vmstat map[string]float64
	// peak is the compressed swap's cost at its largest (Sample).
	peak map[string]float64
	// disks are the disks under the host's disk swap areas as the run
	// began, and disk what they had read and written then.
	disks []string
	disk  map[string]float64
}

// Apply puts the run under the asked settings, each host-wide file
// through the journal, in the registry's order (swap first, so a
// compressor applies to the backend chosen). On an error what was applied
// stays journalled: the caller restores it with Finish.
func Apply(j *Journal, asked Asked, t Target) (*Record, error) {
	a := &applier{j: j, t: t, rec: &Record{Asked: asked}}
	a.vmstat = readVMStat(t.Root)
	// What the disk swap read and wrote, under any setting: the
	// baseline a swap backend is set against.
	a.disks = swapDisks(t.Root)
	a.disk = diskIO(t.Root, a.disks)
	j.applied = a
	for _, s := range Registered {
		if _, ok := asked[s.Name]; !ok {
			continue
		}
		v := asked.Value(s.Name)
		var err error
		switch {
		case s.apply != nil:
			err = s.apply(a, v)
		case s.HostWide(t.V2):
			err = a.host(s.Name, s.File, v)
		case t.V2 || s.V1File == "":
			err = a.cgroup(s.Name, s.File, v)
		default:
			err = a.cgroup(s.Name, s.V1File, v)
		}
		if err != nil {
			return a.rec, fmt.Errorf("%s: %w", s.Name, err)
		}
	}
	if _, ok := asked["swap"]; ok {
		a.rec.SwapAreas = swapAreaLines(t.Root)
	}
	switch {
	case a.rec.Zram != "":
		a.rec.Compressor = inForce(t.Root, "/sys/block/"+strings.TrimPrefix(a.rec.Zram, "/dev/")+"/comp_algorithm")
	case a.zswap():
		a.rec.Compressor = inForce(t.Root, "/sys/module/zswap/parameters/compressor")
	}
	return a.rec, nil
}

// host writes a host-wide file through the journal.
func (a *applier) host(name, path, value string) error {
	files := a.j.files
	before, err := files.Read(path)
	if err != nil {
		return err
	}
	if err := a.j.Set(path, value); err != nil {
		return err
	}
	during, _ := files.Read(path)
	a.rec.Files = append(a.rec.Files, Seen{Setting: name, File: path, Host: true, Wrote: value, Before: before, During: during})
	if !sameValue(during, value) {
		return fmt.Errorf("wrote %q to %s, and it reads %q: the kernel did not take it", value, path, during)
	}
	return nil
}

// cgroup writes a file of the run's own memory cgroup, which goes with it.
func (a *applier) cgroup(name, file, value string) error {
	path := filepath.Join(a.t.Cgroup, file)
	before, err := Host{}.Read(path)
	if err != nil {
		return fmt.Errorf("reading the run cgroup's %s: %w", file, err)
	}
	if err := kernfile.WriteFile(path, []byte(value)); err != nil {
		return err
	}
	during, _ := Host{}.Read(path)
	a.rec.Files = append(a.rec.Files, Seen{Setting: name, File: path, Wrote: value, Before: before, During: during})
	return nil
}

// sameValue compares a value written with the file's reading: a choice
// file reads its choices with the one in force bracketed ("[lz4]"), and
// MGLRU's enabled reads a mask.
func sameValue(read, wrote string) bool {
	if read == wrote {
		return true
	}
	if strings.Contains(read, "["+wrote+"]") {
		return true
	}
	switch wrote {
	case "y":
		return read != "0x0000" && strings.HasPrefix(read, "0x")
	case "n":
		return read == "0x0000"
	}
	return false
}

// Finish ends what Apply began: it reads the cost the run's compressed swap
// had, restores every host-wide file (the zram device reset), reads each
// one back, and ends the journal; it returns what the restore did with
// each change. rec may be nil (Apply was not called).
func (j *Journal) Finish(rec *Record) ([]Outcome, error) {
	if j == nil {
		return nil, nil
	}
	a := j.applied
	if a != nil && rec != nil {
		rec.Cost = a.cost()
	}
	outs, err := j.Restore()
	if rec == nil {
		return outs, err
	}
	for i, s := range rec.Files {
		if s.Host {
			rec.Files[i].After, _ = j.files.Read(s.File)
		}
	}
	for _, o := range outs {
		if o.Action == "kept" {
			rec.Kept = append(rec.Kept, fmt.Sprintf("%s: %s since the run wrote it; left as it is", o.Change, o.Found))
		}
	}
	rec.Restored = err == nil
	if err != nil {
		rec.RestoreError = err.Error()
	}
	return outs, err
}

// errNoSwap is a disk swap asked of a host that has none.
var errNoSwap = errors.New("the host has no swap area but zram: swapon a swap file or partition first (mkswap, swapon)")

// inForce is a choice file's value in force: the bracketed one of a list
// ("lzo [lz4] zstd"), or the file's value.
func inForce(root, path string) string {
	v, _ := Host{Root: root}.Read(path)
	if _, after, ok := strings.Cut(v, "["); ok {
		v, _, _ = strings.Cut(after, "]")
	}
	return strings.TrimSpace(v)
}

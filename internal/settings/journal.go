// Package settings holds the kernel's memory settings a run can be put
// under, and the journal that guarantees a host-wide one is given back.
//
// A host-wide setting (a sysctl, a module's parameter) outlives the process
// that changed it. So its value before is written to a journal in the
// host's state directory (State), synced, before the kernel file is
// written; the run's end restores every value in reverse and removes the
// journal; and a process that died with a journal behind it (a kill -9)
// has it restored by the next thrashscope process that takes the host's
// lock, at its start or before its own run changes anything.
//
// The journal is input a root process acts on, so it is trusted for
// nothing: each entry must name exactly a host-wide file of the registry,
// or a zram device the run sized, or the whole journal is refused before a
// byte is written. A restore writes a file back only while it still holds
// what the run wrote: an administrator's change since is left alone.
package settings

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/thrashscope/thrashscope/internal/kernfile"
	"github.com/thrashscope/thrashscope/internal/strictjson"
)

// JournalFile is the journal's name in the state directory.
const JournalFile = "settings-journal.json"

// maxJournalBytes bounds a journal read back: a handful of files and values.
const maxJournalBytes = 64 << 10

// maxValueBytes bounds a value journalled: a sysctl's or a parameter's.
const maxValueBytes = 64

// Change is one kernel file a run changed, its value before and the one
// written; or a zram device the run sized and made swap (Swapon), with the
// swap header's UUID it wrote and the size it gave, which the restore
// takes off swap and resets if it is still the run's.
type Change struct {
	File   string `json:"file,omitempty"`
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
	Swapon string `json:"swapon,omitempty"`
	UUID   string `json:"uuid,omitempty"`
	Size   int64  `json:"size,omitempty"`
}

func (c Change) String() string {
	if c.Swapon != "" {
		return c.Swapon
	}
	return c.File
}

// File reads and writes the kernel's files, named by their paths on the
// host, and reads and takes off a zram device (Host is the host's).
type File interface {
	Read(path string) (string, error)
	Write(path, value string) error
	SwapOff(node string) error
	Zram(node string) (ZramState, error)
}

// ZramState is what a zram device holds now: whether it is swap, its disk
// size, and the UUID of the swap header on it ("" for none).
type ZramState struct {
	Swap     bool
	DiskSize int64
	UUID     string
}

// zramNode is what a journal's Swapon may name.
var zramNode = regexp.MustCompile(`^/dev/zram[0-9]{1,4}$`)

// Journal is one run's host-wide changes, kept in the host's state
// directory until every one is restored.
type Journal struct {
	state *State
	files File
	Run   string   `json:"run"`
	Done  []Change `json:"changes"`
	// applied is the run's settings being applied, for Finish and Sample.
	applied *applier
	// lock holds the host's settings for this run (State.Lock).
	lock     *os.File
	sampleMu sync.Mutex
}

// Begin starts run's journal. For a run with host-wide settings (host) it
// takes the host's lock (ErrBusy while another process holds it), then
// restores what a journal left behind by a process that died holds, and
// returns what that restore did. A run whose settings are all its own
// cgroup's needs neither.
func Begin(state *State, files File, run string, host bool) (*Journal, []Outcome, error) {
	j := &Journal{files: files, Run: run}
	if !host {
		return j, nil, nil
	}
	lock, err := state.Lock()
	if err != nil {
		return nil, nil, err
	}
	outs, err := restoreLeft(state, files)
	if err != nil {
		lock.Close()
		return nil, outs, err
	}
	j.state, j.lock = state, lock
	return j, outs, nil
}

// Recover restores what a journal left in state holds: the changes of a
// run whose process died before it could. It takes the host's lock for it
// (ErrBusy while another process holds it: the journal is then that
// process's own) and returns what it did, nothing when there was no
// journal.
func Recover(state *State, files File) ([]Outcome, error) {
	lock, err := state.Lock()
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	return restoreLeft(state, files)
}

// restoreLeft restores the journal in state, under the lock its caller
// holds.
func restoreLeft(state *State, files File) ([]Outcome, error) {
	j, err := read(state)
	if err != nil || j == nil {
		return nil, err
	}
	j.state, j.files = state, files
	outs, err := j.restore()
	if err != nil {
		return outs, fmt.Errorf("run %s left host settings that could not all be restored (%w): what is left is in %s/%s; restore the files it names by hand, then remove it", strictjson.Clip(j.Run), err, state.Path(), JournalFile)
	}
	return outs, nil
}

// swapon journals that node is about to be sized to size and made swap
// with a header of uuid, before it is.
func (j *Journal) swapon(node string, size int64, uuid []byte) error {
	j.Done = append(j.Done, Change{Swapon: node, Size: size, UUID: hex.EncodeToString(uuid)})
	if err := j.save(); err != nil {
		j.Done = j.Done[:len(j.Done)-1]
		return fmt.Errorf("journalling %s before making it swap: %w", node, err)
	}
	return nil
}

// Set writes value to the kernel file path, having journalled its value
// before on disk. A value the file already holds is left as it is, and not
// journalled.
func (j *Journal) Set(path, value string) error {
	before, err := j.files.Read(path)
	if err != nil {
		return err
	}
	if before == value {
		return nil
	}
	j.Done = append(j.Done, Change{File: path, Before: before, After: value})
	if err := j.save(); err != nil {
		j.Done = j.Done[:len(j.Done)-1]
		return fmt.Errorf("journalling %s before changing it: %w", path, err)
	}
	if err := j.files.Write(path, value); err != nil {
		// Nothing changed, as far as the kernel said: the entry stays
		// journalled all the same, and its restore finds the file as it
		// was.
		return fmt.Errorf("writing %q to %s: %w", value, path, err)
	}
	return nil
}

// Outcome is what a restore did with one change.
type Outcome struct {
	Change
	// Action is "restored" (written back), "unchanged" (the file, or the
	// device, already as before), "kept" (changed since the run wrote it:
	// by an administrator, left as it is) or "failed" (Err).
	Action string
	// Found is the file's value as the restore found it: what it
	// overwrote, or kept.
	Found string
	Err   error
}

// Restore writes every value back, the last change first, frees the
// host's lock, and removes the journal once all are back. What cannot be
// restored stays journalled, alone, for the next process to try again,
// and is returned as an error; the outcomes say what was done with each.
func (j *Journal) Restore() ([]Outcome, error) {
	outs, err := j.restore()
	if j.lock != nil {
		j.lock.Close()
		j.lock = nil
	}
	return outs, err
}

// Close closes the state directory Begin gave the journal, once it is
// finished.
func (j *Journal) Close() {
	if j != nil && j.state != nil {
		j.state.Close()
	}
}

// restore restores every change it can, and keeps the journal to what it
// could not.
func (j *Journal) restore() ([]Outcome, error) {
	var (
		outs   []Outcome
		left   []Change
		errs   []error
		failed = map[string]bool{}
	)
	for _, c := range slices.Backward(j.Done) {
		if failed[c.String()] {
			// A later change to the same file stays: so does this one.
			left = append([]Change{c}, left...)
			continue
		}
		o := j.restoreOne(c)
		outs = append(outs, o)
		if o.Err != nil {
			failed[c.String()] = true
			left = append([]Change{c}, left...)
			errs = append(errs, o.Err)
		}
	}
	j.Done = left
	var err error
	switch {
	case j.state == nil:
	case len(left) == 0:
		err = j.state.dir.RemoveAll(JournalFile)
	default:
		err = j.save()
	}
	return outs, errors.Join(append(errs, err)...)
}

// restoreOne gives one change back, if what it changed is still as the
// run left it.
func (j *Journal) restoreOne(c Change) Outcome {
	o := Outcome{Change: c}
	if c.Swapon != "" {
		return j.resetZram(o)
	}
	now, err := j.files.Read(c.File)
	switch {
	case err != nil:
		o.Action, o.Err = "failed", fmt.Errorf("reading %s to restore it: %w", c.File, err)
	case now == c.Before:
		o.Action, o.Found = "unchanged", now
	case !sameValue(now, c.After):
		o.Action, o.Found = "kept", now
	default:
		o.Found = now
		if err := j.files.Write(c.File, c.Before); err != nil {
			o.Action, o.Err = "failed", fmt.Errorf("restoring %s to %q: %w", c.File, c.Before, err)
		} else {
			o.Action = "restored"
		}
	}
	return o
}

// resetZram takes a zram device the run sized off swap and resets it (its
// memory freed, its disk size 0, free again), if it is still the run's:
// its swap header the run's, or sized as the run sized it with no header
// yet. A device someone else has taken since is kept.
func (j *Journal) resetZram(o Outcome) Outcome {
	node := o.Swapon
	st, err := j.files.Zram(node)
	switch {
	case err != nil:
		o.Action, o.Err = "failed", fmt.Errorf("reading %s to reset it: %w", node, err)
		return o
	case st.DiskSize == 0 && !st.Swap:
		o.Action = "unchanged"
		return o
	case st.UUID != o.UUID && (st.UUID != "" || st.DiskSize != o.Size || st.Swap):
		o.Action, o.Found = "kept", fmt.Sprintf("disk size %d, swap header %q", st.DiskSize, st.UUID)
		return o
	}
	if st.Swap {
		if err := j.files.SwapOff(node); err != nil {
			o.Action, o.Err = "failed", err
			return o
		}
	}
	reset := "/sys/block/" + strings.TrimPrefix(node, "/dev/") + "/reset"
	if err := j.files.Write(reset, "1"); err != nil {
		o.Action, o.Err = "failed", fmt.Errorf("resetting %s: %w", node, err)
		return o
	}
	o.Action = "restored"
	return o
}

// save writes the journal whole, synced: a crash leaves the old one or the
// new one.
func (j *Journal) save() error {
	if j.state == nil {
		return errors.New("no journal for a run without host-wide settings")
	}
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	return j.state.dir.WriteFile(JournalFile, b, 0o600)
}

// read is the journal in state, nil when there is none. Anything but a
// journal thrashscope could have written refuses the whole of it.
func read(state *State) (*Journal, error) {
	b, err := state.dir.ReadPrivateFile(JournalFile, maxJournalBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	path := state.Path() + "/" + JournalFile
	refuse := func(err error) error {
		return fmt.Errorf("%s: %w; thrashscope wrote no such journal and acts on none of it: restore by hand what it names, if anything, then remove it", path, err)
	}
	if err != nil {
		return nil, refuse(err)
	}
	var j Journal
	if err := strictjson.Check(b); err != nil {
		return nil, refuse(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return nil, refuse(err)
	}
	for i, c := range j.Done {
		if err := c.check(); err != nil {
			return nil, refuse(fmt.Errorf("change %d: %w", i+1, err))
		}
	}
	return &j, nil
}

// check holds a journalled change to what thrashscope journals: exactly a
// host-wide file of the registry with its values, or a zram device with
// its header and size, never both.
func (c Change) check() error {
	switch {
	case c.Swapon != "":
		if c.File != "" || c.Before != "" || c.After != "" {
			return fmt.Errorf("names a zram device and a file (%q)", strictjson.Clip(c.File))
		}
		if !zramNode.MatchString(c.Swapon) {
			return fmt.Errorf("%q is not a zram device", strictjson.Clip(c.Swapon))
		}
		if u, err := hex.DecodeString(c.UUID); err != nil || len(u) != 16 || c.Size <= 0 {
			return fmt.Errorf("%s: no swap header UUID and disk size of the run's", c.Swapon)
		}
	case !slices.Contains(hostFiles(), c.File):
		return fmt.Errorf("%q is not a host-wide file of thrashscope's settings (%s)", strictjson.Clip(c.File), strings.Join(hostFiles(), ", "))
	case c.UUID != "" || c.Size != 0:
		return fmt.Errorf("%s: a file has no swap header or size", c.File)
	default:
		for _, v := range []string{c.Before, c.After} {
			if v == "" || len(v) > maxValueBytes || strings.ContainsFunc(v, func(r rune) bool { return !unicode.IsPrint(r) }) {
				return fmt.Errorf("%s: %q is not a value the kernel reads back", c.File, strictjson.Clip(v))
			}
		}
	}
	return nil
}

// hostFiles are the host-wide files the settings write: each setting's
// file, and zswap's switch, which the swap backends set.
func hostFiles() []string {
	out := []string{zswapEnabled}
	for _, s := range Registered {
		if s.Host && s.File != "" && !slices.Contains(out, s.File) {
			out = append(out, s.File)
		}
	}
	return out
}

// Host is the host's kernel files, under Root ("" is /): a value read is
// the file's first line, and a write is one write(2), whose error is the
// kernel's answer.
type Host struct{ Root string }

// Read reads path's value.
func (h Host) Read(path string) (string, error) {
	b, err := os.ReadFile(filepath.Join(h.Root, path))
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return line, nil
}

// Write writes value to path.
func (h Host) Write(path, value string) error {
	return kernfile.WriteFile(filepath.Join(h.Root, path), []byte(value))
}

// SwapOff takes node off swap; one that is not swap is no error.
func (h Host) SwapOff(node string) error {
	return swapoff(filepath.Join(h.Root, node))
}

// Zram reads what the zram device node holds.
func (h Host) Zram(node string) (ZramState, error) {
	return zramState(h.Root, node)
}

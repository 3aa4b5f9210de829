package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// Exists reports whether /proc/<pid> is there: the process lives (or is a
// zombie not yet reaped).
func (fs FS) Exists(pid int) bool {
	_, err := os.Stat(filepath.Join(fs.path, strconv.Itoa(pid)))
	return err == nil
}

// Smaps reads /proc/<pid>/smaps into buf, reused across calls, and returns
// the buffer with its totals; the read walks every mapping. smaps rather
// than smaps_rollup because the demand needs Referenced and Pss per
// mapping: 2.5 times the text for a Go process's 70 mappings, the same walk.
func (fs FS) Smaps(pid int, buf []byte) (Smaps, []byte, error) {
	f, err := os.Open(filepath.Join(fs.path, strconv.Itoa(pid), "smaps"))
	if err != nil {
		return Smaps{}, buf, err
	}
	defer f.Close()
	b := buf[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF || (err == nil && n == 0) {
			break
		}
		if err != nil {
			return Smaps{}, b, err
		}
	}
	if len(b) == 0 {
		// The mm went away between open and read.
		return Smaps{}, b, fmt.Errorf("pid %d: %w", pid, ErrProcessGone)
	}
	r, err := ParseSmaps(b)
	if err != nil {
		return Smaps{}, b, fmt.Errorf("pid %d: %w", pid, err)
	}
	return r, b, nil
}

// ClearRefs writes "1" to /proc/<pid>/clear_refs: the accessed bits and
// PG_referenced of all its pages, anonymous and file, are cleared.
func (fs FS) ClearRefs(pid int) error {
	// No O_TRUNC: it means nothing to the kernel, and would empty a fixture.
	f, err := os.OpenFile(filepath.Join(fs.path, strconv.Itoa(pid), "clear_refs"), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte("1"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pid %d: clearing accessed bits: %w", pid, err)
	}
	return nil
}

// Smaps is the part of /proc/<pid>/smaps the working-set estimator uses,
// summed over the mappings, in bytes.
type Smaps struct {
	RSS, Swap, Referenced uint64
	// PSS and SwapPSS are the process's proportional share: a page mapped
	// by n processes counts 1/n in each.
	PSS, SwapPSS uint64
	// OwnReferenced is Referenced split the same way: each mapping's
	// Referenced × its Pss/Rss. A binary's text, mapped by 25 consumers,
	// counts once among them instead of 25 times.
	OwnReferenced uint64
	// FileNotResident is what the shared mappings of files hold neither
	// in memory nor in swap (Size less Rss and Swap): where a page-cache
	// thrash's evicted pages are, which neither Pss nor Swap counts.
	FileNotResident uint64
}

// maxKB is 2^44 kB, 16 EiB: a larger "N kB" is not a size, and shifting it
// to bytes would wrap.
const maxKB = 1 << 44

// ParseSmaps sums the "Field:  N kB" lines of each mapping of an smaps file
// (a header line "lo-hi perms offset dev inode path", then its fields).
// smaps_rollup has the same shape with one header. Rss and Referenced are
// required; Swap and SwapPss are 0 when absent, and Pss is Rss (nothing
// shared) when absent.
func ParseSmaps(b []byte) (Smaps, error) {
	var out Smaps
	var haveRss, haveRef bool
	var m mappingSums
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(line) == 0 {
			continue
		}
		if c := line[0]; c >= '0' && c <= '9' || c >= 'a' && c <= 'f' {
			m.addTo(&out) // a mapping's header: the one before it is complete
			m.file = sharedFile(line)
			continue
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var dst *uint64
		switch string(name) {
		case "Rss":
			dst, haveRss = &m.rss, true
		case "Pss":
			dst, m.havePss = &m.pss, true
		case "Referenced":
			dst, haveRef = &m.ref, true
		case "Size":
			dst = &m.size
		case "Swap":
			dst = &m.swap
		case "SwapPss":
			dst = &out.SwapPSS
		default:
			continue
		}
		num, ok := bytes.CutSuffix(bytes.TrimSpace(value), []byte(" kB"))
		n, err := strconv.ParseUint(string(bytes.TrimSpace(num)), 10, 64)
		if !ok || err != nil || n > maxKB {
			return Smaps{}, fmt.Errorf("smaps: bad %s line %q", name, line)
		}
		*dst += n << 10
	}
	m.addTo(&out)
	if !haveRss || !haveRef {
		return Smaps{}, errors.New("smaps: no Rss or Referenced line")
	}
	return out, nil
}

// mappingSums are one mapping's lines, until the next mapping's header.
type mappingSums struct {
	size, rss, pss, ref, swap uint64
	havePss, file             bool
}

// sharedFile says whether a mapping's header ("lo-hi perms offset dev inode
// path") is a shared mapping ("rw-s") of a file (its inode, the fifth
// field, is not 0): where a page-cache thrash's data is. A private one's
// unwritten pages are a binary's text or a library's, whose pages never
// faulted in would read as demand (a Go binary's text: about 3 MiB a
// process, not split among the processes that map it), and its written
// ones are anonymous, in swap.
func sharedFile(header []byte) bool {
	_, rest, _ := bytes.Cut(header, []byte(" "))
	if len(rest) < 4 || rest[3] != 's' {
		return false
	}
	for range 4 {
		i := bytes.IndexByte(header, ' ')
		if i < 0 {
			return false
		}
		header = bytes.TrimLeft(header[i:], " ")
	}
	inode, _, _ := bytes.Cut(header, []byte(" "))
	return len(inode) > 0 && string(inode) != "0"
}

// addTo adds the mapping to out, its referenced bytes split as Pss splits
// Rss, and starts the next.
func (m *mappingSums) addTo(out *Smaps) {
	if !m.havePss {
		m.pss = m.rss
	}
	out.RSS += m.rss
	out.PSS += m.pss
	out.Referenced += m.ref
	out.Swap += m.swap
	if m.file && m.size > m.rss+m.swap {
		out.FileNotResident += m.size - m.rss - m.swap
	}
	if m.rss > 0 {
		out.OwnReferenced += uint64(float64(m.ref) * float64(min(m.pss, m.rss)) / float64(m.rss))
	}
	*m = mappingSums{}
}

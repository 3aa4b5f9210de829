package codepages

import (
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

const smapsSample = `00400000-00b40000 r-xp 00000000 fd:01 1234                               /usr/bin/observer
Size:               7424 kB
Rss:                6784 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
00b40000-01326000 r--p 00740000 fd:01 1234                               /usr/bin/observer
Size:               8088 kB
Rss:                7448 kB
Anonymous:             4 kB
VmFlags: rd mr mw me
01326000-013ba000 rw-p 00f26000 fd:01 1234                               /usr/bin/observer
Rss:                 464 kB
Anonymous:            80 kB
013ba000-033ff000 rw-p 00000000 00:00 0 
Rss:                 108 kB
Anonymous:           108 kB
7f950e606000-7f950e609000 r--s 00000000 00:10 77                         anon_inode:bpf-map
Rss:                  12 kB
7f950e700000-7f950e800000 r-xp 00000000 fd:01 999                        /usr/lib/other.so
Rss:                  40 kB
Anonymous:             0 kB
`

func TestChoose(t *testing.T) {
	maps, err := parseSmaps([]byte(smapsSample))
	if err != nil {
		t.Fatal(err)
	}
	if len(maps) != 6 {
		t.Fatalf("parsed %d mappings, want 6: %+v", len(maps), maps)
	}
	text := maps[0]
	if text.start != 0x400000 || text.end != 0xb40000 || text.perms != "r-xp" || text.rss != 6784<<10 || text.inode != 1234 || text.dev != unix.Mkdev(0xfd, 1) {
		t.Errorf("text mapping parsed as %+v", text)
	}
	if dev, ino, ok := fileAt(maps, 0x401000); !ok || dev != unix.Mkdev(0xfd, 1) || ino != 1234 {
		t.Errorf("the file at 0x401000: %d:%d, %v; want fd:01 1234", dev, ino, ok)
	}
	if _, _, ok := fileAt(maps, 0x13ba000); ok {
		t.Error("an anonymous mapping (inode 0) taken for a file")
	}
	release, kept := choose(maps, unix.Mkdev(0xfd, 1), 1234)
	// The text only: the read-only data holds a private page, the data
	// segment is writable, the rest are other files.
	if len(release) != 1 || release[0].start != 0x400000 || kept != 1 {
		t.Errorf("choose: release %+v, kept %d; want the text alone, one kept", release, kept)
	}
	if release, kept := choose(maps, unix.Mkdev(0xfd, 2), 1234); len(release) != 0 || kept != 0 {
		t.Errorf("another device's inode 1234: release %+v, kept %d; want none", release, kept)
	}
}

func TestParseSmapsRejects(t *testing.T) {
	for _, in := range []string{
		"Rss: 4 kB\n",
		"00400000 r-xp 00000000 fd:01 1234 /bin/x\n",
		"00400000-00b40000 r-xp 00000000 fd01 1234 /bin/x\n",
		"00400000-zz r-xp 00000000 fd:01 1234 /bin/x\n",
	} {
		if _, err := parseSmaps([]byte(in)); err == nil {
			t.Errorf("%q parsed without an error", in)
		}
	}
}

func TestTracerAttached(t *testing.T) {
	for in, want := range map[string]bool{"Name:\tx\nTracerPid:\t0\n": false, "TracerPid:\t4711\n": true} {
		if got, err := tracerAttached([]byte(in)); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := tracerAttached([]byte("Name:\tx\n")); err == nil {
		t.Error("a status without TracerPid gave no error")
	}
}

// exeMappings reads this process's smaps: the executable's read-only
// mappings.
func exeMappings(t *testing.T) []mapping {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	maps, err := parseSmaps(b)
	if err != nil {
		t.Fatal(err)
	}
	var exe syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &exe); err != nil {
		t.Fatal(err)
	}
	dev, ino, ok := fileAt(maps, textAddress())
	if !ok {
		t.Fatal("no file mapped at the test binary's text")
	}
	if dev != exe.Dev || ino != exe.Ino {
		t.Logf("the text's file is %d:%d in smaps, /proc/self/exe %d:%d (overlayfs)", dev, ino, exe.Dev, exe.Ino)
	}
	var out []mapping
	for _, m := range maps {
		if m.dev == dev && m.inode == ino && m.releasable() {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		t.Fatal("no read-only mapping of the test binary in /proc/self/smaps")
	}
	return out
}

// mapped counts the pages of maps present in this process's page tables
// (/proc/self/pagemap's bit 63), read with little code run in between.
func mapped(t *testing.T, pagemap *os.File, maps []mapping, buf []byte) (n int) {
	t.Helper()
	pg := uintptr(os.Getpagesize())
	for _, m := range maps {
		for a := m.start; a < m.end; {
			b := buf[:min(uintptr(len(buf)), (m.end-a)/pg*8)]
			k, err := pagemap.ReadAt(b, int64(a/pg*8))
			if err != nil || k < 8 {
				t.Fatalf("reading /proc/self/pagemap at %x: %d bytes, %v", a, k, err)
			}
			for i := 0; i+8 <= k; i += 8 {
				if b[i+7]&0x80 != 0 {
					n++
				}
			}
			a += uintptr(k/8) * pg
		}
	}
	return n
}

// TestReleaseUnmapsTheBinary releases this test binary's pages and reads
// what the kernel says is still mapped: a fraction of what was, the
// pages that ran since. A page made private (as a breakpoint makes one)
// keeps its mapping, and its content.
func TestReleaseUnmapsTheBinary(t *testing.T) {
	pagemap, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatal(err)
	}
	defer pagemap.Close()
	maps, buf := exeMappings(t), make([]byte, 64<<10)
	before := mapped(t, pagemap, maps, buf)
	r, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	after := mapped(t, pagemap, maps, buf)
	t.Logf("the binary's read-only mappings: %d pages mapped, %d after Release (%+v)", before, after, r)
	if r.Mappings == 0 || r.Bytes == 0 {
		t.Fatalf("Release unmapped nothing: %+v", r)
	}
	// What maps back in between is what ran: the reads of pagemap, the
	// testing package and the runtime's own threads, each fault mapping a
	// 64 KB window around it (fault-around). 44-46 % of the pages came
	// back here (6.18, 3 runs: 298-314 of 682); three fifths leaves room
	// for another kernel's fault-around, and fails a Release that unmapped
	// little.
	if after*5 > before*3 {
		t.Errorf("%d pages of the binary still mapped after Release, of %d before: want under three fifths", after, before)
	}

	// A private copy of a page of read-only data, written in place as a
	// debugger writes a breakpoint into the text.
	const lit = "a string in the binary's read-only data"
	p := unsafe.Pointer(unsafe.StringData(lit))
	page := unsafe.Add(p, -int(uintptr(p)&uintptr(os.Getpagesize()-1)))
	mem := unsafe.Slice((*byte)(page), os.Getpagesize())
	if err := unix.Mprotect(mem, unix.PROT_READ|unix.PROT_WRITE); err != nil {
		t.Fatal(err)
	}
	word := (*uint32)(page)
	atomic.StoreUint32(word, atomic.LoadUint32(word)) // the same bytes: the content does not change
	if err := unix.Mprotect(mem, unix.PROT_READ); err != nil {
		t.Fatal(err)
	}
	r, err = Release()
	if err != nil {
		t.Fatal(err)
	}
	if r.Kept == 0 {
		t.Errorf("Release kept no mapping with a private page: %+v", r)
	}
	var anon uint64
	for _, m := range exeMappings(t) {
		anon += m.anonymous
	}
	if anon == 0 {
		t.Error("the private page is gone from the binary's mappings after Release")
	}
	if got := strings.Clone(lit); got != "a string in the binary's read-only data" {
		t.Errorf("the literal reads %q after Release", got)
	}
	runtime.KeepAlive(lit)
}

package main

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// The bench's own workloads run as children of the bench (it runs itself
// with "work" first), each put in the scenario's cgroups before it is told
// to go by a line on its stdin, so that all it maps is charged there.

const page = 4096

// work runs one workload: work <kind> [key=value ...].
func work(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("work: want a kind")
	}
	kv := map[string]string{}
	for _, a := range args[1:] {
		k, v, ok := cutEq(a)
		if !ok {
			return fmt.Errorf("work: %q is not key=value", a)
		}
		kv[k] = v
	}
	num := func(k string) int64 {
		n, _ := strconv.ParseInt(kv[k], 10, 64)
		return n
	}
	dur := func(k string) time.Duration {
		d, _ := time.ParseDuration(kv[k])
		return d
	}
	// Wait for the go line: the bench has put this process in its groups.
	// A storm's processes start in their parent's.
	if args[0] != "start" {
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil && err != io.EOF {
			return err
		}
	}
	switch args[0] {
	case "touch":
		return touch(num("size"), num("hot"), num("cold_per_s"), kv["shared"] == "1", dur("for"))
	case "readback":
		return readback(num("size"), time.Unix(0, num("at")), dur("for"))
	case "mmapscan":
		for range max(1, num("passes")) {
			if err := mmapScan(kv["file"], num("offset"), num("length")); err != nil {
				return err
			}
		}
		return nil
	case "readtree":
		return readTree(kv["dir"])
	case "storm":
		return storm(kv["bins"], int(num("n")), dur("for"))
	case "start":
		return startUp(num("size"), kv["lib"], num("lib_size"), dur("for"))
	}
	return fmt.Errorf("work: unknown kind %q", args[0])
}

func cutEq(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == '=' {
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}

// region maps size bytes: private anonymous memory, or shared memory (the
// memfd the bench passes as fd 3, as a database's backends share a buffer
// pool), filled with random bytes so that compression does not hide it.
func region(size int64, shared bool) ([]byte, error) {
	if shared {
		return unix.Mmap(3, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}
	b, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	_ = unix.Madvise(b, unix.MADV_NOHUGEPAGE)
	return b, nil
}

func fillRandom(b []byte) {
	r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

// touch fills a region of size bytes, then for d writes one random page of
// its first hot bytes after another, and cold_per_s pages a second of the
// rest (light use of memory kept cold).
func touch(size, hot, coldPerSecond int64, shared bool, d time.Duration) error {
	b, err := region(size, shared)
	if err != nil {
		return err
	}
	if !shared {
		fillRandom(b)
	}
	if hot <= 0 || hot > size {
		hot = size
	}
	hotPages, coldPages := hot/page, (size-hot)/page
	end := time.Now().Add(d)
	nextCold, tick := time.Now(), time.Duration(0)
	if coldPerSecond > 0 {
		tick = time.Second / time.Duration(coldPerSecond)
	}
	for n := 0; time.Now().Before(end); n++ {
		for range 256 {
			b[rand.Int64N(hotPages)*page+rand.Int64N(page)]++
		}
		if tick > 0 && coldPages > 0 {
			for now := time.Now(); nextCold.Before(now); nextCold = nextCold.Add(tick) {
				b[(hotPages+rand.Int64N(coldPages))*page]++
			}
		}
	}
	return nil
}

// readback fills a region, sleeps until at, then reads every page of it
// once in a random order (an idle process woken by a timer walks its heap
// as it pleases, not as swap readahead guesses), and sleeps out d.
func readback(size int64, at time.Time, d time.Duration) error {
	end := time.Now().Add(d)
	b, err := region(size, false)
	if err != nil {
		return err
	}
	fillRandom(b)
	order := rand.Perm(len(b) / page)
	time.Sleep(time.Until(at))
	var sum byte
	for _, i := range order {
		sum += b[i*page]
	}
	sink = sum
	time.Sleep(time.Until(end))
	return nil
}

// sink keeps the reads of a page from being optimised away.
var sink byte

// mmapScan maps length bytes of file at offset and reads each page once in
// order, with readahead off (MADV_RANDOM): a query reading index and data
// pages, each a major fault when cold.
func mmapScan(file string, offset, length int64) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := unix.Mmap(int(f.Fd()), offset, int(length), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer unix.Munmap(b)
	_ = unix.Madvise(b, unix.MADV_RANDOM)
	var sum byte
	for i := 0; i < len(b); i += page {
		sum += b[i]
	}
	sink = sum
	return nil
}

// readTree reads every file under dir with read(2), 1 MiB at a time, as a
// backup does.
func readTree(dir string) error {
	buf := make([]byte, 1<<20)
	return filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		for {
			if _, err := f.Read(buf); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
		}
	})
}

// storm starts n processes at once, each from its own cold copy of the
// bench's binary in bins (bin-0 ... bin-n-1) with its own cold library
// (lib-0 ...), and waits for them.
func storm(bins string, n int, d time.Duration) error {
	var procs []*os.Process
	for i := range n {
		p, err := os.StartProcess(filepath.Join(bins, fmt.Sprintf("bin-%d", i)),
			[]string{"alerts", "work", "start", "size=" + strconv.Itoa(16<<20), "for=" + d.String(),
				"lib=" + filepath.Join(bins, fmt.Sprintf("lib-%d", i)), "lib_size=" + strconv.Itoa(stormLib)},
			&os.ProcAttr{Files: []*os.File{nil, os.Stdout, os.Stderr}})
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	for _, p := range procs {
		_, _ = p.Wait()
	}
	return nil
}

// stormLib is the size of each storm process's own cold library.
const stormLib = 8 << 20

// startUp is one process of a start-up storm: it loads its library (each
// page of a cold file read through mmap, in no order readahead would
// follow, as a runtime loads classes), maps and fills its heap, then idles
// for d.
func startUp(size int64, lib string, libSize int64, d time.Duration) error {
	if lib != "" {
		if err := mmapScan(lib, 0, libSize); err != nil {
			return err
		}
	}
	b, err := region(size, false)
	if err != nil {
		return err
	}
	fillRandom(b)
	time.Sleep(d)
	return nil
}

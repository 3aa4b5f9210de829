package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// memoryDir is a tmpfs every Linux host mounts: the kubelet's build keeps
// its Go caches and its work there, so that none of its gigabytes reach
// the disk the tests beside it swap to.
const memoryDir = "/dev/shm"

// buildKubeletInMemory builds only the kubelet into cache (as the kubelet
// kit takes it), its module cache, build cache and work in memory, removed
// after. It installs nothing and runs no container, so that it can run
// beside make test: the build is CPU work at whatever priority it is
// given, and one file written to disk at its end.
func buildKubeletInMemory(ctx context.Context, cache string) error {
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(cache, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("another deploytest holds %s: wait for it to end: %w", lock.Name(), err)
	}
	if err := tmpfs(memoryDir); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(memoryDir, "thrashscope-kubelet-")
	if err != nil {
		return err
	}
	e := &env{ctx: ctx, cache: cache, work: filepath.Join(dir, "work"), start: time.Now()}
	defer removeGoCaches(dir)
	for k, v := range map[string]string{"GOCACHE": "gocache", "GOMODCACHE": "gomodcache", "GOTMPDIR": "tmp"} {
		p := filepath.Join(dir, v)
		if err := os.MkdirAll(p, 0o700); err != nil {
			return err
		}
		os.Setenv(k, p)
	}
	_, err = e.ensureKubelet()
	return err
}

// tmpfs fails unless dir is a tmpfs.
func tmpfs(dir string) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	const tmpfsMagic = 0x01021994
	if st.Type != tmpfsMagic {
		return fmt.Errorf("%s is not a tmpfs here: the kubelet's build would write its caches to disk; build it with make test-deploy instead", dir)
	}
	return nil
}

// removeGoCaches removes dir, its module cache made writable first (the Go
// command makes it read-only).
func removeGoCaches(dir string) {
	_ = exec.Command("go", "clean", "-modcache").Run() // GOMODCACHE is dir's
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}

package settings_test

import (
	"testing"

	"github.com/thrashscope/thrashscope/internal/outdir"
	"github.com/thrashscope/thrashscope/internal/settings"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

const pageCluster = "/proc/sys/vm/page-cluster"

func dataDir(t *testing.T) *outdir.Dir {
	t.Helper()
	d, err := outdir.Open(t.TempDir(), 0o750)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// The host's own files: vm.page-cluster set through a journal, seen in the
// kernel's file, and restored from the journal alone, as after a kill -9.
func TestHostFileRestoredFromTheJournal(t *testing.T) {
	testenv.RequirePrivileged(t)
	h := settings.Host{}
	before, err := h.Read(pageCluster)
	if err != nil {
		testenv.Unavailable(t, "no "+pageCluster+": "+err.Error())
	}
	want := "0"
	if before == "0" {
		want = "1"
	}
	d := dataDir(t)
	j, err := settings.Begin(d, h, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Write(pageCluster, before) })
	if err := j.Set(pageCluster, want); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.Read(pageCluster); got != want {
		t.Fatalf("the kernel's %s reads %q, want %q", pageCluster, got, want)
	}
	if _, err := settings.Recover(d, h); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.Read(pageCluster); got != before {
		t.Errorf("after the recovery %s reads %q, want %q back", pageCluster, got, before)
	}
}

package settings_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/thrashscope/thrashscope/internal/settings"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// holdLockEnv names the state directory whose lock the test binary, run
// again by TestTheHostLock, takes and holds until its stdin closes.
const holdLockEnv = "THRASHSCOPE_TEST_HOLD_LOCK"

func TestMain(m *testing.M) {
	if dir := os.Getenv(holdLockEnv); dir != "" {
		os.Exit(holdLock(dir))
	}
	os.Exit(m.Run())
}

func holdLock(dir string) int {
	s, err := settings.OpenState(dir)
	if err == nil {
		_, err = s.Lock()
	}
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("locked")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

const pageCluster = "/proc/sys/vm/page-cluster"

func stateDir(t *testing.T) *settings.State {
	t.Helper()
	s, err := settings.OpenState(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
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
	d := stateDir(t)
	j, _, err := settings.Begin(d, h, "run-1", true)
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
	j.Abandon() // kill -9
	if _, err := settings.Recover(d, h); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.Read(pageCluster); got != before {
		t.Errorf("after the recovery %s reads %q, want %q back", pageCluster, got, before)
	}
}

// The host's lock holds for a thrashscope process in another network
// namespace (it is a file lock, not a name in one namespace), frees when
// that process dies, and cannot be taken by an unprivileged user, whose
// failed try leaves it free.
func TestTheHostLock(t *testing.T) {
	testenv.RequirePrivileged(t)
	parent := t.TempDir()
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "state")
	s, err := settings.OpenState(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	holder := exec.Command(os.Args[0], "-test.run=^$")
	holder.Env = append(os.Environ(), holdLockEnv+"="+dir)
	holder.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	stdin, _ := holder.StdinPipe()
	stdout, _ := holder.StdoutPipe()
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	defer stdin.Close()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "locked" {
		t.Fatalf("the holder: %q", line)
	}
	mine, _ := os.Readlink("/proc/self/ns/net")
	theirs, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", holder.Process.Pid))
	if mine == theirs || theirs == "" {
		t.Fatalf("the holder's network namespace %q is this one's (%q)", theirs, mine)
	}
	if _, err := s.Lock(); !errors.Is(err, settings.ErrBusy) {
		t.Errorf("the lock while a process in another network namespace holds it: %v, want ErrBusy", err)
	}
	stdin.Close()
	holder.Wait()
	l, err := s.Lock()
	if err != nil {
		t.Fatalf("the lock once its holder is gone: %v", err)
	}
	l.Close()

	if _, err := exec.LookPath("flock"); err != nil {
		t.Fatal("no flock(1) (util-linux) to try the lock as another user")
	}
	try := exec.Command("flock", "--nonblock", filepath.Join(dir, "host-settings.lock"), "true")
	try.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := try.CombinedOutput()
	if err == nil {
		t.Errorf("uid 65534 took the host's lock: %s", out)
	}
	l, err = s.Lock()
	if err != nil {
		t.Fatalf("the lock after uid 65534 tried it: %v", err)
	}
	l.Close()
}

// A journal another user owns is refused, though it is well formed: in a
// directory whose owner let someone else write, they would have planted it.
func TestAJournalOfAnotherUserIsRefused(t *testing.T) {
	testenv.RequirePrivileged(t)
	s := stateDir(t)
	before, err := settings.Host{}.Read(pageCluster)
	if err != nil {
		t.Fatal(err)
	}
	other := "0"
	if before == "0" {
		other = "1"
	}
	p := filepath.Join(s.Path(), settings.JournalFile)
	j := `{"run":"x","changes":[{"file":"` + pageCluster + `","before":"` + other + `","after":"` + before + `"}]}`
	if err := os.WriteFile(p, []byte(j), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := settings.Recover(s, settings.Host{}); err == nil || !strings.Contains(err.Error(), "uid 65534") {
		t.Errorf("a journal of uid 65534: %v, want a refusal naming its owner", err)
	}
	if now, _ := (settings.Host{}).Read(pageCluster); now != before {
		_ = settings.Host{}.Write(pageCluster, before)
		t.Errorf("%s was written: %s, want %s", pageCluster, now, before)
	}
}

// zram swap is refused before anything changes where this process could
// not make the device swap: no device node (a unit with PrivateDevices=),
// or no CAP_SYS_ADMIN for swapon (the systemd unit's capability set).
func TestZramRefusedWhereSwaponCannotRun(t *testing.T) {
	testenv.RequirePrivileged(t) // mknod
	root := t.TempDir()
	for path, text := range map[string]string{
		"proc/swaps":               "Filename Type Size Used Priority\n/var/swap file 1024 0 -2\n",
		"sys/block/zram0/disksize": "0\n",
		"proc/self/status":         "Name:\tobserver\nCapEff:\t000000c000000004\n", // CAP_DAC_OVERRIDE, CAP_PERFMON, CAP_BPF
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var asked settings.Asked
	if err := asked.UnmarshalJSON([]byte(`{"swap":"zram"}`)); err != nil {
		t.Fatal(err)
	}
	if err := asked.Check(true, false, root); err == nil || !strings.Contains(err.Error(), "PrivateDevices") {
		t.Errorf("no /dev/zram0: %v, want a refusal naming PrivateDevices", err)
	}
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(root, "dev/zram0"), syscall.S_IFBLK|0o600, 0); err != nil {
		t.Fatal(err)
	}
	if err := asked.Check(true, false, root); err == nil || !strings.Contains(err.Error(), "CAP_SYS_ADMIN") {
		t.Errorf("without CAP_SYS_ADMIN: %v, want a refusal naming it", err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc/self/status"), []byte("CapEff:\t000001ffffffffff\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := asked.Check(true, false, root); err != nil {
		t.Errorf("with every capability and the device: %v", err)
	}
}

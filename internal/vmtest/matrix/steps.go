package main

import (
	"strings"

	"github.com/thrashscope/thrashscope/internal/vmtest"
)

// step is one step of the guest's plan; Package, when set, is the package
// whose test binary it runs (built static, with its testdata).
type step struct {
	vmtest.Step
	Package string
}

// tests is -test.run for exactly these tests.
func tests(names ...string) []string {
	return []string{"-test.run", "^(" + strings.Join(names, "|") + ")$"}
}

// Steps is the guest's plan: what proves function, not speed, under TCG.
var Steps = []step{
	// Every probe loads and attaches, or is named with why not.
	{Step: vmtest.Step{Name: vmtest.CheckStep, Path: vmtest.GuestBin + "/observer", Args: []string{"--check"}, TimeoutSeconds: 300}},
	// The probes against the kernel's own figures: maj_flt by kind, the
	// stall against the group's memory.pressure, per process and per
	// cgroup, in the kernel's own way.
	{Package: "internal/probe", Step: vmtest.Step{Name: "probes", GoTest: true, TimeoutSeconds: 2400,
		Args: tests("TestMajorFaultKindsAgreeWithMajFlt", "TestMajorFaultKindsInADeepAddressSpace", "TestMemoryStallAgreesWithPSI", "TestProcessExitClearsCounters", "TestMajorFaultLatencyIsTimed", "TestCgroupCountersAgreeWithTheKernel", "TestCgroupCountersWhenManyShareTheSlots", "TestCgroupChurnLosesNothing", "TestWakesWhenFaultsBegin")}},
	// The same, forced to the portable way where the kernel's own is the
	// fast one (not applicable where it is not).
	{Package: "internal/probe", Step: vmtest.Step{Name: "portable way", GoTest: true, TimeoutSeconds: 2400,
		Args: tests("TestThePortableWayHere")}},
	// A consumer joins a run cgroup another has filled to its limit, under
	// the OOM guard.
	{Package: "internal/consumer", Step: vmtest.Step{Name: "full group", GoTest: true, TimeoutSeconds: 600,
		Args: tests("TestConsumerJoinsAFullGroup")}},
	// Run cgroups under memory.max, the v2 freezer, the OOM guard, io.max.
	{Package: "internal/cgroup", Step: vmtest.Step{Name: "cgroups", GoTest: true, TimeoutSeconds: 900,
		Args: tests("TestCreateAddDestroy", "TestChildUnderTheLimit", "TestOOMKills", "TestOOMGuard", "TestFreezeStopsAndThawResumes", "TestFrozenProcessDiesOfSIGKILL", "TestThrottleIO", "TestThrottleIONamesTheFix", "TestReclaimOfNothingComesBack")}},
	// A run over the API with every consumer alive and nothing left after
	// it and after an abort; kill -9 of the observer with consumers frozen,
	// then the restart's clean-up; a run on the papers' disk, held to it by
	// io.max.
	{Package: "internal/observer", Step: vmtest.Step{Name: "runs", GoTest: true, TimeoutSeconds: 1800,
		Args: tests("TestRunKeepsEveryConsumer", "TestRunAbortLeavesNothing", "TestObserverKilledWithConsumersFrozen", "TestRunOnAnEmulatedSwapDevice")}},
	// A workload's readings of its cgroup's own files (v2 here: current,
	// swap.current, max, memory.stat) against its one process's.
	{Package: "internal/workload", Step: vmtest.Step{Name: "workloads", GoTest: true, TimeoutSeconds: 600,
		Args: tests("TestReadKernelAgreesWithTheProcess")}},
	// The workloads' series on a pure v2 host: one each whatever the
	// names, and pod labels only under the kubelet's root.
	{Package: "internal/observer", Step: vmtest.Step{Name: "workload series", GoTest: true, TimeoutSeconds: 600,
		Args: tests("TestHostileNamesGiveDistinctSeries", "TestPodLabelsOnlyUnderTheKubeletRoot")}},
	// The daemon unmaps its binary's pages that ran once, and keeps a
	// mapping whose page a breakpoint made private.
	{Package: "internal/codepages", Step: vmtest.Step{Name: "code pages", GoTest: true, TimeoutSeconds: 300,
		Args: tests("TestReleaseUnmapsTheBinary")}},
	// A PSI trigger on a group's memory.pressure wakes its reader in a
	// thrash (the guest's root has CAP_SYS_RESOURCE: the 500 ms window).
	{Package: "internal/pressure", Step: vmtest.Step{Name: "pressure", GoTest: true, TimeoutSeconds: 600,
		Args: tests("TestTriggerFiresOnARealThrash")}},
	// A run's kernel memory settings applied and given back after
	// completion, DELETE, SIGTERM and kill -9 with a restart; MGLRU off and
	// on (whichever the kernel does not have) with min_ttl_ms, where the
	// kernel has it (6.1, 6.12), refused naming CONFIG_LRU_GEN where not.
	{Package: "internal/observer", Step: vmtest.Step{Name: "settings", GoTest: true, TimeoutSeconds: 1800,
		Args: tests("TestHostSettingsAlwaysGivenBack")}},
	// The policies' levers: calmdown freezes the newest, tpf protects one.
	{Package: "internal/runner", Step: vmtest.Step{Name: "policies", GoTest: true, TimeoutSeconds: 1800,
		Args: tests("TestCalmDownStopsTheNewest", "TestTPFProtectsOneConsumer")}},
}

package main

// bpfRound is what the kernel counted for the observer's programs over one
// observed window, next to the ops the workload did in it.
type bpfRound struct {
	Ops               uint64            `json:"ops"`
	Seconds           float64           `json:"seconds"`
	OpsPerSec         float64           `json:"ops_per_sec"`
	AttributedPercent float64           `json:"attributed_percent"`
	Programs          []programCounters `json:"programs"`
}

// newBPFRound pairs one window's statistics delta with the workload's result.
func newBPFRound(res workloadResult, before, after countersSnapshot) (bpfRound, error) {
	progs, err := countersDelta(before, after)
	if err != nil {
		return bpfRound{}, err
	}
	r := bpfRound{Ops: res.Ops, Seconds: res.Seconds, OpsPerSec: res.OpsPerSec, Programs: progs}
	r.AttributedPercent = attributedPercent(float64(totalRunTimeNs(progs)), r.Ops, r.OpsPerSec)
	return r, nil
}

func totalRunTimeNs(progs []programCounters) uint64 {
	var ns uint64
	for _, p := range progs {
		ns += p.RunTimeNs
	}
	return ns
}

// attributedPercent is BPF run time as a share of the time the ops took at
// the observed rate: bpfNs / (ops × ns per op) × 100, with ns per op =
// 1e9 / opsPerSec. Zero when there is nothing to divide by (JSON has no NaN).
func attributedPercent(bpfNs float64, ops uint64, opsPerSec float64) float64 {
	if ops == 0 || opsPerSec <= 0 {
		return 0
	}
	nsPerOp := 1e9 / opsPerSec
	return bpfNs / (float64(ops) * nsPerOp) * 100
}

// bpfAttribution is one workload's observed windows pooled: what each
// thrashscope program cost per op, and all of them together as a share of
// the op's time at the observed rate.
type bpfAttribution struct {
	Windows int     `json:"windows"`
	Ops     uint64  `json:"ops"`
	Seconds float64 `json:"seconds"`
	// NsPerOp is the op's time at the pooled observed rate, 1e9 × seconds / ops.
	NsPerOp    float64 `json:"ns_per_op"`
	BPFNsPerOp float64 `json:"bpf_ns_per_op"`
	// AttributedPercent is the figure the target is judged on.
	AttributedPercent float64              `json:"attributed_percent"`
	RoundsPercent     summary              `json:"rounds_attributed_percent"`
	Programs          []programAttribution `json:"programs"`
	Rounds            []bpfRound           `json:"rounds"`
}

// programAttribution is one program's pooled counters and what they mean
// per op.
type programAttribution struct {
	programCounters
	RunsPerOp         float64 `json:"runs_per_op"`
	NsPerRun          float64 `json:"ns_per_run"`
	NsPerOp           float64 `json:"ns_per_op"`
	AttributedPercent float64 `json:"attributed_percent"`
}

// newBPFAttribution pools the rounds: counters and ops add up, and the
// observed rate is the total ops over the total window time. Nil without
// rounds (--baseline-only).
func newBPFAttribution(rounds []bpfRound) *bpfAttribution {
	if len(rounds) == 0 {
		return nil
	}
	a := &bpfAttribution{Windows: len(rounds), Rounds: rounds}
	byName := map[string]programCounters{}
	perRound := make([]float64, 0, len(rounds))
	for _, r := range rounds {
		a.Ops += r.Ops
		a.Seconds += r.Seconds
		perRound = append(perRound, r.AttributedPercent)
		for _, p := range r.Programs {
			c := byName[p.Name]
			c.Name = p.Name
			c.Runs += p.Runs
			c.RunTimeNs += p.RunTimeNs
			c.RecursionMisses += p.RecursionMisses
			byName[p.Name] = c
		}
	}
	a.RoundsPercent = summarize(perRound)
	var opsPerSec float64
	if a.Seconds > 0 {
		opsPerSec = float64(a.Ops) / a.Seconds
	}
	if a.Ops > 0 {
		a.NsPerOp = a.Seconds * 1e9 / float64(a.Ops)
	}
	var total uint64
	for _, c := range orderedPrograms(byName) {
		p := programAttribution{programCounters: c}
		if a.Ops > 0 {
			p.RunsPerOp = float64(c.Runs) / float64(a.Ops)
			p.NsPerOp = float64(c.RunTimeNs) / float64(a.Ops)
		}
		if c.Runs > 0 {
			p.NsPerRun = float64(c.RunTimeNs) / float64(c.Runs)
		}
		p.AttributedPercent = attributedPercent(float64(c.RunTimeNs), a.Ops, opsPerSec)
		a.Programs = append(a.Programs, p)
		total += c.RunTimeNs
	}
	if a.Ops > 0 {
		a.BPFNsPerOp = float64(total) / float64(a.Ops)
	}
	a.AttributedPercent = attributedPercent(float64(total), a.Ops, opsPerSec)
	return a
}

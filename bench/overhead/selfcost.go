package main

import (
	"fmt"
	"sync"
	"time"
)

// selfCost is what the observer process itself used over one or more
// windows: CPU in clock ticks against wall time, and its resident set.
type selfCost struct {
	CPUTicks uint64
	Seconds  float64
	RSSKiB   uint64 // largest VmRSS sampled inside the windows
	HWMKiB   uint64 // VmHWM at the end: includes start-up and BPF load
}

// add folds another window in: time adds up, memory keeps the peak.
func (c selfCost) add(o selfCost) selfCost {
	return selfCost{
		CPUTicks: c.CPUTicks + o.CPUTicks,
		Seconds:  c.Seconds + o.Seconds,
		RSSKiB:   max(c.RSSKiB, o.RSSKiB),
		HWMKiB:   max(c.HWMKiB, o.HWMKiB),
	}
}

// selfCostFigures is selfCost in the units the report speaks.
type selfCostFigures struct {
	CPUPercent float64 `json:"cpu_percent_of_one_core"`
	RSSMiB     float64 `json:"rss_mib"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	CPUTicks   uint64  `json:"cpu_ticks"`
	Seconds    float64 `json:"seconds"`
}

func (c selfCost) figures(ticksPerSecond uint64) selfCostFigures {
	f := selfCostFigures{
		RSSMiB:     float64(c.RSSKiB) / 1024,
		PeakRSSMiB: float64(c.HWMKiB) / 1024,
		CPUTicks:   c.CPUTicks,
		Seconds:    c.Seconds,
	}
	if c.Seconds > 0 && ticksPerSecond > 0 {
		f.CPUPercent = float64(c.CPUTicks) / float64(ticksPerSecond) / c.Seconds * 100
	}
	return f
}

// rssPollInterval is how often VmRSS is sampled inside a window; VmHWM
// catches any peak between samples.
const rssPollInterval = 250 * time.Millisecond

// selfCostSampler measures one window of the observer's own cost.
type selfCostSampler struct {
	procRoot   string
	pid        int
	start      time.Time
	startTicks uint64

	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	peakRSS uint64
	pollErr error
}

// startSelfCost opens a window: it reads the CPU time now and polls the
// resident set until finish.
func startSelfCost(procRoot string, pid int) (*selfCostSampler, error) {
	ticks, err := readProcessCPUTicks(procRoot, pid)
	if err != nil {
		return nil, fmt.Errorf("reading observer CPU time: %w", err)
	}
	s := &selfCostSampler{
		procRoot:   procRoot,
		pid:        pid,
		start:      time.Now(),
		startTicks: ticks,
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	s.pollRSS()
	go s.loop()
	return s, nil
}

func (s *selfCostSampler) loop() {
	defer close(s.done)
	t := time.NewTicker(rssPollInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.pollRSS()
		}
	}
}

func (s *selfCostSampler) pollRSS() {
	m, err := readProcessMem(s.procRoot, s.pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.pollErr == nil {
			s.pollErr = err
		}
		return
	}
	s.peakRSS = max(s.peakRSS, m.RSSKiB)
}

// finish closes the window and returns what the observer used in it.
func (s *selfCostSampler) finish() (selfCost, error) {
	close(s.stop)
	<-s.done
	end := time.Now()
	ticks, err := readProcessCPUTicks(s.procRoot, s.pid)
	if err != nil {
		return selfCost{}, fmt.Errorf("reading observer CPU time: %w", err)
	}
	m, err := readProcessMem(s.procRoot, s.pid)
	if err != nil {
		return selfCost{}, fmt.Errorf("reading observer memory: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pollErr != nil {
		return selfCost{}, fmt.Errorf("reading observer memory: %w", s.pollErr)
	}
	return selfCost{
		CPUTicks: ticks - s.startTicks,
		Seconds:  end.Sub(s.start).Seconds(),
		RSSKiB:   max(s.peakRSS, m.RSSKiB),
		HWMKiB:   m.HWMKiB,
	}, nil
}

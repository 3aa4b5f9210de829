package probe

import (
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// wakeReader turns the programs' wakes (the wakes ring buffer) into a
// channel: a goroutine asleep in the ring buffer's epoll until a program
// writes, so a host at rest costs nothing.
type wakeReader struct {
	rd   *ringbuf.Reader
	c    chan struct{}
	done chan struct{}
}

// startWakes has the programs write a wake when memory trouble begins, at
// most once per gap, where the kernel took the ring buffer.
func (p *Probe) startWakes(gap time.Duration) {
	if p.objs.Wakes == nil || p.objs.WakeGapNs == nil {
		p.logger.Warn("the sampler keeps to its interval: this kernel did not take the wakes ring buffer", "err", p.notLoaded["wakes"])
		return
	}
	rd, err := ringbuf.NewReader(p.objs.Wakes)
	if err == nil {
		err = p.objs.WakeGapNs.Set(uint64(gap))
		if err != nil {
			rd.Close()
		}
	}
	if err != nil {
		p.logger.Warn("the sampler keeps to its interval", "err", err)
		return
	}
	p.wake = wakeReader{rd: rd, c: make(chan struct{}, 1), done: make(chan struct{})}
	go p.wake.run()
}

func (w wakeReader) run() {
	defer close(w.done)
	var rec ringbuf.Record
	for {
		if err := w.rd.ReadInto(&rec); err != nil {
			return // closed
		}
		select {
		case w.c <- struct{}{}:
		default: // one waits already
		}
	}
}

func (w wakeReader) close() {
	if w.rd == nil {
		return
	}
	w.rd.Close()
	<-w.done
}

// Wakes receives a value when memory trouble begins (a major fault, a thread
// stalling), at most once per Options.WakeGap; nil when off.
func (p *Probe) Wakes() <-chan struct{} { return p.wake.c }

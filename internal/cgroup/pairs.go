package cgroup

import "sync"

// Pairs names, for the groups thrashscope makes in both hierarchies of a
// hybrid host, each cgroup2 group's v1 memory group: the exact group a
// reader of the cgroup2 group's memory figures reads, where the two are
// not at the same path (a run's groups go under the observer's own group
// in each hierarchy, and those need not be alike). Nothing is guessed from
// a member process. Safe for concurrent use; a nil *Pairs holds none.
type Pairs struct {
	mu sync.RWMutex
	m  map[string]string // cgroup2 directory to v1 memory directory
}

// Pair records that the cgroup2 group at unifiedDir has its memory in the
// v1 group at memoryDir.
func (p *Pairs) Pair(unifiedDir, memoryDir string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]string{}
	}
	p.m[unifiedDir] = memoryDir
}

// Unpair forgets groups that are being removed.
func (p *Pairs) Unpair(unifiedDirs ...string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range unifiedDirs {
		delete(p.m, d)
	}
}

// Memory is the v1 memory group paired with the cgroup2 group at
// unifiedDir; "" when none is.
func (p *Pairs) Memory(unifiedDir string) string {
	if p == nil {
		return ""
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.m[unifiedDir]
}

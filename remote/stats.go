package remote

import (
	"slices"
	"sync"
	"time"
)

// latencies keeps the last round trips for percentiles. A nil *latencies
// keeps nothing (the sinks imported from references, made per event).
type latencies struct {
	mu   sync.Mutex
	ring []time.Duration
	next int
	full bool
}

func newLatencies() *latencies { return &latencies{ring: make([]time.Duration, 1024)} }

func (l *latencies) add(d time.Duration) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.ring[l.next] = d
	l.next++
	if l.next == len(l.ring) {
		l.next, l.full = 0, true
	}
	l.mu.Unlock()
}

func (l *latencies) percentiles() (p50, p99 time.Duration) {
	if l == nil {
		return 0, 0
	}
	l.mu.Lock()
	n := l.next
	if l.full {
		n = len(l.ring)
	}
	s := slices.Clone(l.ring[:n])
	l.mu.Unlock()
	if len(s) == 0 {
		return 0, 0
	}
	slices.Sort(s)
	return s[len(s)*50/100], s[min(len(s)-1, len(s)*99/100)]
}

package remote

import (
	"slices"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/ring"
)

// latencies keeps the last round trips for percentiles. A nil *latencies
// keeps nothing (the sinks imported from references, made per event).
type latencies struct {
	mu   sync.Mutex
	last *ring.Ring[time.Duration]
}

func newLatencies() *latencies { return &latencies{last: ring.New[time.Duration](1024)} }

func (l *latencies) add(d time.Duration) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.last.Push(d)
	l.mu.Unlock()
}

func (l *latencies) percentiles() (p50, p99 time.Duration) {
	if l == nil {
		return 0, 0
	}
	l.mu.Lock()
	s := l.last.AppendTo(nil)
	l.mu.Unlock()
	if len(s) == 0 {
		return 0, 0
	}
	slices.Sort(s)
	return s[len(s)*50/100], s[min(len(s)-1, len(s)*99/100)]
}

package threadpool

import (
	"sync"
	"sync/atomic"
	"time"
)

// LockMeter adds up how long a stage's handlers wait to acquire their
// locks: the lock latency of the [Whirlwind] controller. Every [Pool] has
// one ([Pool.LockMeter]); handlers report to it with [Mutex], or with
// Observe around locks of their own. The zero value is ready to use and
// safe for concurrent use.
//
// The runtime itself takes no lock around a handler: a SingleThreaded
// stage has one worker, and a keyed stage's events wait in the queue for
// their key (counted as queue latency). Lock latency is therefore what the
// handlers say it is; a stage that reports nothing has none, and the
// Whirlwind controller's lock rule never holds its growth back.
type LockMeter struct {
	waited atomic.Int64 // nanoseconds
	n      atomic.Uint64
}

// Observe records one acquisition that waited wait (0 if uncontended).
func (m *LockMeter) Observe(wait time.Duration) {
	if wait > 0 {
		m.waited.Add(int64(wait))
	}
	m.n.Add(1)
}

// Totals returns the total wait and the number of acquisitions recorded.
// Read while handlers report, the two may disagree by the acquisitions
// being recorded at that moment.
func (m *LockMeter) Totals() (waited time.Duration, acquisitions uint64) {
	return time.Duration(m.waited.Load()), m.n.Load()
}

// Mutex is a mutual exclusion lock that reports how long each Lock waited
// to Meter (nil: none). An uncontended Lock reads no clock: it costs a
// sync.Mutex.TryLock and one atomic add. The zero value is an unlocked
// Mutex with no meter; like sync.Mutex it must not be copied after first
// use.
type Mutex struct {
	Meter *LockMeter
	mu    sync.Mutex
}

// Lock locks m, waiting if it is held, and reports the wait.
func (m *Mutex) Lock() {
	if m.mu.TryLock() {
		if m.Meter != nil {
			m.Meter.Observe(0)
		}
		return
	}
	start := time.Now()
	m.mu.Lock()
	if m.Meter != nil {
		m.Meter.Observe(time.Since(start))
	}
}

// TryLock tries to lock m without waiting; a success is reported as an
// uncontended acquisition.
func (m *Mutex) TryLock() bool {
	if !m.mu.TryLock() {
		return false
	}
	if m.Meter != nil {
		m.Meter.Observe(0)
	}
	return true
}

// Unlock unlocks m.
func (m *Mutex) Unlock() { m.mu.Unlock() }

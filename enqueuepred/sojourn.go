package enqueuepred

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// SojournConfig configures NewSojourn's predicate. Zero fields take defaults.
type SojournConfig struct {
	Target   time.Duration // acceptable standing queueing delay; default 5ms
	Interval time.Duration // observation window; default 100ms
	// Shed also drops events already queued, as CoDel does at dequeue
	// (sink.Shedder): once events have waited more than Target for an
	// Interval, the runtime drops one, then the next after
	// Interval/sqrt(count), until an event waited less than Target or
	// the queue is empty. Dropped events are counted by the queue
	// (Stage.Shed) and cancelled, never silently lost.
	Shed bool
	Now  func() time.Time // nil: time.Now
}

// sojourn is a CoDel-style admission policy (Nichols & Jacobson 2012, and
// the "adaptive LIFO + CoDel" practice of shedding work once a queue has not
// drained for a while). It watches the time events spent queued, reported by
// the runtime through sink.Done, and keeps the minimum over each Interval:
// a minimum above Target means a standing queue, not a burst, so the stage
// rejects new events until a window's minimum falls back under Target or the
// queue it guards is seen empty.
type sojourn struct {
	boundSink
	counts
	clock monoClock

	overloaded atomic.Bool
	deadline   atomic.Int64 // end of the current window, clock ns

	mu       sync.Mutex
	cfg      SojournConfig
	minQueue time.Duration // minimum queued time in the current window
	samples  int
	windows  uint64 // overloaded windows so far
	lastMin  time.Duration
	// CoDel dequeue state (Shed).
	firstAbove int64 // clock ns when the sojourn time may start dropping; 0: below target
	dropping   bool
	dropNext   int64
	dropCount  int
	shed       uint64
}

var (
	_ sink.Completer = (*sojourn)(nil)
	_ sink.Shedder   = (*sojourn)(nil)
)

// NewSojourn returns a CoDel-style predicate (YAML `codel`, `sojourn`):
// when the minimum time events spent queued over an Interval stays above
// Target (a standing queue, not a burst), it rejects new events until a
// window's minimum falls back under Target or the queue is seen empty.
// With Shed it also drops queued events at dequeue (sink.Shedder).
func NewSojourn(c SojournConfig) sink.Predicate { return newSojourn(c) }

// newSojourn is NewSojourn, returning the concrete type.
func newSojourn(c SojournConfig) *sojourn {
	s := &sojourn{clock: newMonoClock(c.Now), minQueue: math.MaxInt64}
	s.cfg = c.withDefaults()
	s.deadline.Store(s.clock.ns() + int64(s.cfg.Interval))
	return s
}

func (c SojournConfig) withDefaults() SojournConfig {
	if c.Target <= 0 {
		c.Target = 5 * time.Millisecond
	}
	if c.Interval <= 0 {
		c.Interval = 100 * time.Millisecond
	}
	return c
}

// Name implements sink.Namer.
func (s *sojourn) Name() string { return "codel" }

// Accept implements sink.Predicate.
func (s *sojourn) Accept(e sink.Event) bool {
	now := s.clock.ns()
	if now >= s.deadline.Load() && s.mu.TryLock() {
		s.rollLocked(now)
		s.mu.Unlock()
	}
	if !s.overloaded.Load() || sink.IsNonRejectable(e) {
		return s.yes()
	}
	if s.len() == 0 {
		// The queue drained: the standing queue is gone.
		s.overloaded.Store(false)
		return s.yes()
	}
	return s.no()
}

// charge implements charger.
func (s *sojourn) charge(sink.Event) { s.accepted.Add(1) }

// Done implements sink.Completer.
func (s *sojourn) Done(_ sink.Event, queued, _ time.Duration) {
	now := s.clock.ns()
	s.mu.Lock()
	if now >= s.deadline.Load() {
		s.rollLocked(now)
	}
	s.samples++
	s.minQueue = min(s.minQueue, queued)
	s.mu.Unlock()
}

// rollLocked closes the current window.
func (s *sojourn) rollLocked(now int64) {
	if now < s.deadline.Load() {
		return
	}
	if s.samples > 0 {
		over := s.minQueue > s.cfg.Target
		s.overloaded.Store(over)
		if over {
			s.windows++
		}
		s.lastMin = s.minQueue
	} else if s.len() == 0 {
		s.overloaded.Store(false)
	}
	s.samples = 0
	s.minQueue = math.MaxInt64
	s.deadline.Store(now + int64(s.cfg.Interval))
}

// Shed implements sink.Shedder: CoDel's dequeue-side control law (RFC
// 8289) when SojournConfig.Shed is set, else false.
func (s *sojourn) Shed(e sink.Event, waited time.Duration) bool {
	if !s.cfg.Shed || sink.IsNonRejectable(e) {
		return false
	}
	now := s.clock.ns()
	s.mu.Lock()
	defer s.mu.Unlock()
	interval := int64(s.cfg.Interval)
	if waited < s.cfg.Target || s.len() == 0 {
		s.firstAbove, s.dropping = 0, false
		return false
	}
	if s.firstAbove == 0 {
		s.firstAbove = now + interval
		return false
	}
	if !s.dropping {
		if now < s.firstAbove {
			return false
		}
		s.dropping = true
		// Resume near the previous drop rate if dropping stopped only
		// recently (RFC 8289 §5.5).
		if s.dropCount > 2 && now-s.dropNext < 16*interval {
			s.dropCount -= 2
		} else {
			s.dropCount = 1
		}
		s.dropNext = now + int64(float64(interval)/math.Sqrt(float64(s.dropCount)))
		s.shed++
		return true
	}
	if now < s.dropNext {
		return false
	}
	s.dropCount++
	s.dropNext += int64(float64(interval) / math.Sqrt(float64(s.dropCount)))
	s.shed++
	return true
}

// SetConfig changes target and interval (not Shed) while traffic flows.
func (s *sojourn) SetConfig(c SojournConfig) {
	s.mu.Lock()
	c.Now = nil
	c.Shed = s.cfg.Shed
	s.cfg = c.withDefaults()
	s.mu.Unlock()
}

// Overloaded reports whether the predicate is rejecting.
func (s *sojourn) Overloaded() bool { return s.overloaded.Load() }

// Inspect implements Inspector.
func (s *sojourn) Inspect(report func(string, float64)) {
	s.mu.Lock()
	last, windows, target, shed := s.lastMin, s.windows, s.cfg.Target, s.shed
	s.mu.Unlock()
	report("shed", float64(shed))
	over := 0.0
	if s.overloaded.Load() {
		over = 1
	}
	report("overloaded", over)
	report("min_queued", seconds(last))
	report("target", seconds(target))
	report("overloaded_windows", float64(windows))
	s.inspect(report)
}

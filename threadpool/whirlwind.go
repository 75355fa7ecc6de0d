package threadpool

import (
	"sync"
	"time"
)

// Whirlwind controller defaults. The paper gives none; these ask for a
// worker when events wait more than 20 ms, refuse it while handlers wait
// more than 5 ms for their locks, and give one back when workers idle more
// than 5 % of the (1 s) interval.
const (
	DefaultWhirlwindIdleTime     = 50 * time.Millisecond
	DefaultWhirlwindQueueLatency = 20 * time.Millisecond
	DefaultWhirlwindLockLatency  = 5 * time.Millisecond
)

// WhirlwindConfig holds the thresholds of the [Whirlwind] controller. Every
// zero field takes the default named in its comment.
type WhirlwindConfig struct {
	// IdleTime: give back a worker when the workers waited for work
	// longer than this on average over an interval (0 → 50ms). It is
	// per ControllerConfig.Interval: 50ms of 1s is 5 % idle.
	IdleTime time.Duration `yaml:"idleTime"`
	// QueueLatency: add a worker when events waited in the queue longer
	// than this on average over an interval (0 → 20ms)...
	QueueLatency time.Duration `yaml:"queueLatency"`
	// LockLatency: ...unless handlers waited this long or longer, on
	// average, to acquire their locks (0 → 5ms): more workers would only
	// queue on the lock.
	LockLatency time.Duration `yaml:"lockLatency"`
}

// Validate reports the first negative threshold as a [*FieldError]
// wrapping [ErrInvalidControllerConfig]. Zero fields are valid (they mean
// default).
func (c WhirlwindConfig) Validate() error {
	switch {
	case c.IdleTime < 0:
		return fieldErr("idleTime", "%v is negative", c.IdleTime)
	case c.QueueLatency < 0:
		return fieldErr("queueLatency", "%v is negative", c.QueueLatency)
	case c.LockLatency < 0:
		return fieldErr("lockLatency", "%v is negative", c.LockLatency)
	}
	return nil
}

func (c WhirlwindConfig) withDefaults() WhirlwindConfig {
	if c.IdleTime == 0 {
		c.IdleTime = DefaultWhirlwindIdleTime
	}
	if c.QueueLatency == 0 {
		c.QueueLatency = DefaultWhirlwindQueueLatency
	}
	if c.LockLatency == 0 {
		c.LockLatency = DefaultWhirlwindLockLatency
	}
	return c
}

// Whirlwind is the Whirlwind paper's default concurrency controller (§III.F,
// Fig. 1) as a clock-free [Sizer]. Each tick, with n = Sample.Size:
//
//	if IdleTime > cfg.IdleTime:            n-- (not below min)
//	else if n < max and QueueLatency > cfg.QueueLatency
//	        and LockLatency < cfg.LockLatency: n++
//
// One step per tick either way. Unlike [Controller] it keeps no history:
// the pool measures the three averages over each interval (see [Sample]),
// and the answer depends on the sample alone. It detects no thrashing
// either: a CPU-bound stage whose queue latency stays high grows to max
// unless its handlers report lock contention (see [LockMeter]).
//
// A Whirlwind is safe for concurrent use.
type Whirlwind struct {
	cfg      WhirlwindConfig
	min, max int

	mu             sync.Mutex
	last           Sample
	grows, shrinks uint64
}

// NewWhirlwind returns a Whirlwind controller for a pool of min..max
// workers. It panics if cfg is invalid or the bounds are not
// 0 ≤ min ≤ max, max ≥ 1, as [NewController] does.
func NewWhirlwind(cfg WhirlwindConfig, min, max int) *Whirlwind {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	checkBounds("NewWhirlwind", min, max)
	return &Whirlwind{cfg: cfg.withDefaults(), min: min, max: max}
}

// Config returns the configuration with defaults applied.
func (w *Whirlwind) Config() WhirlwindConfig {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cfg
}

// Tick applies Fig. 1 to one sample and returns the desired pool size, in
// [min, max].
func (w *Whirlwind) Tick(s Sample) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = s
	n := clamp(s.Size, w.min, w.max)
	switch {
	case s.IdleTime > w.cfg.IdleTime:
		if n > w.min {
			n--
			w.shrinks++
		}
	case n < w.max && s.QueueLatency > w.cfg.QueueLatency && s.LockLatency < w.cfg.LockLatency:
		n++
		w.grows++
	}
	return n
}

// WhirlwindStats is what a [Whirlwind] controller has seen and done.
type WhirlwindStats struct {
	Last           Sample // the latest sample
	Grows, Shrinks uint64 // ticks that added or removed a worker
}

// Stats returns the latest sample and the number of steps taken.
func (w *Whirlwind) Stats() WhirlwindStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return WhirlwindStats{Last: w.last, Grows: w.grows, Shrinks: w.shrinks}
}

package threadpool

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrInvalidControllerConfig is wrapped by every error that
// [ControllerConfig.Validate] reports.
var ErrInvalidControllerConfig = errors.New("threadpool: invalid controller config")

// Controller defaults (SEDA thesis §5.4.1).
const (
	DefaultControllerInterval = time.Second
	DefaultQueueThreshold     = 100
	DefaultIdle               = 5 * time.Second
	DefaultSmoothing          = 0.3
	DefaultMargin             = 0.2
	DefaultResetEvery         = 10
	DefaultMaxRandomDrop      = 4
)

// Controller types: the values of [ControllerConfig.Type].
const (
	TypeSEDA      = "seda"      // Controller, the SEDA thesis's (the default)
	TypeWhirlwind = "whirlwind" // Whirlwind, the Whirlwind paper's Fig. 1
)

// ControllerTypes returns the known values of [ControllerConfig.Type].
func ControllerTypes() []string { return []string{TypeSEDA, TypeWhirlwind} }

// ControllerConfig configures a pool's controller: the thesis's
// [Controller] (Type "" or "seda"), the [Whirlwind] controller (Type
// "whirlwind"), or the developer's own [Sizer] (NewSizer). Its zero value
// means "disabled, defaults everywhere"; every zero field takes the default
// named in its comment.
type ControllerConfig struct {
	// Type picks the controller: "" or "seda" (Controller), "whirlwind"
	// (Whirlwind). NewSizer, if set, takes precedence.
	Type string `yaml:"type"`
	// Enabled turns the controller on. A disabled controller still measures
	// throughput but always answers the current size (clamped to [min,max]).
	// A Pool whose Max exceeds its Min turns it on by itself, with
	// AutoMaxDetect, unless Disabled is set (see Config).
	Enabled bool `yaml:"enabled"`
	// Disabled keeps a Pool's controller off even though its Max exceeds
	// its Min: the pool then stays at its initial size. Configuration
	// files say `enabled: false`.
	Disabled bool `yaml:"-"`
	// Interval is the sampling period the driver ticks at (0 → 1s). The
	// controller itself reads time only from Sample.Now; Interval scales the
	// smoothing of irregularly spaced samples.
	Interval time.Duration `yaml:"interval"`
	// QueueThreshold: add a worker when the queue length is ≥ this at a tick
	// (0 → 100). A Pool whose queue is bounded lowers it to half the
	// queue's capacity, rounded up (see FitQueueThreshold): a length the
	// queue can never reach would never grow the pool.
	QueueThreshold int `yaml:"queueThreshold"`
	// Idle: a worker continuously idle this long may be retired (0 → 5s).
	// The pool counts such workers into Sample.IdleWorkers.
	Idle time.Duration `yaml:"idle"`
	// AutoMaxDetect enables thrashing detection (thesis Fig. 31).
	AutoMaxDetect bool `yaml:"autoMaxDetect"`
	// Smoothing is the EWMA weight of a new throughput sample taken one
	// Interval after the previous one (0 → 0.3), in (0,1].
	Smoothing float64 `yaml:"smoothing"`
	// Margin is the relative hysteresis of thrashing detection (0 → 0.2).
	Margin float64 `yaml:"margin"`
	// ResetEvery: thrashing is checked every ResetEvery-th measured tick
	// (0 → 10).
	ResetEvery int `yaml:"resetEvery"`
	// MaxRandomDrop: on thrashing the pool is reset to the best size minus a
	// random 0..MaxRandomDrop workers (0 → 4; negative → no random drop).
	MaxRandomDrop int `yaml:"maxRandomDrop"`

	// Whirlwind holds type whirlwind's thresholds; in files its keys
	// (idleTime, queueLatency, lockLatency) sit in the controller block
	// itself. The fields above from QueueThreshold on are type seda's.
	Whirlwind WhirlwindConfig `yaml:",inline"`

	// NewSizer, if set, makes the pool's controller instead of Type: the
	// developer's own algorithm, as the Whirlwind paper allows (§III.F).
	// The pool calls it once with its bounds, and then the Sizer's Tick
	// once per Interval; Enabled, Disabled and Interval apply as for the
	// built-in types. Go only.
	NewSizer func(min, max int) Sizer `yaml:"-"`
}

// FieldError is the error [ControllerConfig.Validate] returns: the YAML key
// of the invalid field and what is wrong with it. It wraps
// [ErrInvalidControllerConfig].
type FieldError struct {
	Key    string // e.g. "queueLatency"
	Reason string // e.g. "-1s is negative"
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%v: %s %s", ErrInvalidControllerConfig, e.Key, e.Reason)
}

// Unwrap returns [ErrInvalidControllerConfig].
func (e *FieldError) Unwrap() error { return ErrInvalidControllerConfig }

func fieldErr(key, format string, args ...any) error {
	return &FieldError{Key: key, Reason: fmt.Sprintf(format, args...)}
}

// Validate reports the first invalid field, wrapping
// [ErrInvalidControllerConfig]. Zero fields are valid (they mean default).
func (c ControllerConfig) Validate() error {
	switch {
	case c.Type != "" && !slices.Contains(ControllerTypes(), c.Type):
		return fieldErr("type", "%q is unknown (known: %s)", c.Type, strings.Join(ControllerTypes(), ", "))
	case c.Interval < 0:
		return fieldErr("interval", "%v is negative", c.Interval)
	case c.QueueThreshold < 0:
		return fieldErr("queueThreshold", "%d is negative", c.QueueThreshold)
	case c.Idle < 0:
		return fieldErr("idle", "%v is negative", c.Idle)
	case math.IsNaN(c.Smoothing) || c.Smoothing < 0 || c.Smoothing > 1:
		return fieldErr("smoothing", "%v is outside [0,1]", c.Smoothing)
	case math.IsNaN(c.Margin) || c.Margin < 0 || c.Margin >= 1:
		return fieldErr("margin", "%v is outside [0,1)", c.Margin)
	case c.ResetEvery < 0:
		return fieldErr("resetEvery", "%d is negative", c.ResetEvery)
	}
	return c.Whirlwind.Validate()
}

// FitQueueThreshold returns the queue threshold a controller of a stage
// whose queue holds at most capacity events (≤ 0: unbounded) works with:
// threshold (0 → DefaultQueueThreshold), at most ⌈capacity/2⌉.
//
// A threshold above the capacity can never be reached: a stage whose
// queue stays full would never grow. Half the capacity, not all of it: the
// controller samples the length once per interval, and a full queue is
// seldom seen full at that instant, its workers taking batches from it
// and its producers being turned away; a queue at least half full at a
// tick is a backlog, and the stage is then already rejecting or about to.
func FitQueueThreshold(threshold, capacity int) int {
	if threshold <= 0 {
		threshold = DefaultQueueThreshold
	}
	if capacity > 0 {
		threshold = min(threshold, (capacity+1)/2)
	}
	return threshold
}

// withDefaults returns c with every zero field replaced by its default.
func (c ControllerConfig) withDefaults() ControllerConfig {
	if c.Interval == 0 {
		c.Interval = DefaultControllerInterval
	}
	if c.QueueThreshold == 0 {
		c.QueueThreshold = DefaultQueueThreshold
	}
	if c.Idle == 0 {
		c.Idle = DefaultIdle
	}
	if c.Smoothing == 0 {
		c.Smoothing = DefaultSmoothing
	}
	if c.Margin == 0 {
		c.Margin = DefaultMargin
	}
	if c.ResetEvery == 0 {
		c.ResetEvery = DefaultResetEvery
	}
	if c.MaxRandomDrop == 0 {
		c.MaxRandomDrop = DefaultMaxRandomDrop
	}
	if c.MaxRandomDrop < 0 {
		c.MaxRandomDrop = 0
	}
	c.Whirlwind = c.Whirlwind.withDefaults()
	return c
}

// Sample is what the pool reports to the controller at each tick.
//
// The first five fields are read at the tick. The last three are averages
// over the interval since the previous tick (since Start for the first),
// measured without reading the clock on the event path; they are zero over
// an empty interval (a tick whose Now is not after the previous one's). See
// Pool for how each is measured.
type Sample struct {
	Now         time.Time // the tick's time (real or fake clock)
	QueueLen    int       // the stage's queue length
	Processed   uint64    // cumulative events completed by the stage
	Size        int       // current number of workers
	IdleWorkers int       // workers continuously idle for ≥ Idle at this tick

	// IdleTime is the average time a worker spent waiting for work
	// during the interval: the interval times the fraction of the
	// workers parked on the queue (Whirlwind's idleTime).
	IdleTime time.Duration
	// QueueLatency is the average time an event spent in the queue
	// before a worker took it (Whirlwind's queueLatency).
	QueueLatency time.Duration
	// LockLatency is the average time the stage's handlers waited to
	// acquire a lock they report to the pool's LockMeter (Whirlwind's
	// lockLatency); zero if they report none.
	LockLatency time.Duration
}

// Controller is the SEDA thread-pool controller (thesis §5.4.1, Figs. 30
// and 31) as a clock-free state machine: the pool calls [Controller.Tick]
// once per Interval with a [Sample] and resizes itself to the answer.
//
// Each tick applies these rules, in order:
//
//  1. Throughput. rate = ΔProcessed / ΔNow between this sample and the
//     previous one. It feeds an EWMA whose weight is
//     a = 1 − (1−Smoothing)^(ΔNow/Interval), so a late tick counts for as
//     much as the ticks it replaces. The first sample only sets the
//     baseline; a sample whose Now is not after the previous one is ignored
//     for measurement; a counter that went backwards (stage restarted)
//     re-baselines. Only ticks that yield a rate are "measured ticks".
//  2. Queue and idleness. If QueueLen ≥ QueueThreshold the target is
//     Size+1 ("backlogged" tick); otherwise, if IdleWorkers > 0, the target
//     is Size−IdleWorkers; otherwise Size.
//     3a. Growth check (AutoMaxDetect). When a backlogged tick grows the
//     pool from n workers, the next tick (if the pool did grow to the
//     target) compares its rate (the interval ran wholly at the new size)
//     with the rate at n: if it is not above rate·(1 + ¼·added/n), a
//     quarter of what a perfectly parallel stage would gain, and the
//     stage is still backlogged, the workers added are not
//     working (a CPU-bound stage past the number of cores, a lock): the
//     target and the limit go back to n (recorded as the best size if
//     there is no record yet).
//     So a CPU-bound stage stops one interval after it passes its best
//     size, and AutoMaxDetect's periodic checks (rule 3) raise the limit
//     again to re-probe. A zero rate at n (a blocked stage) decides
//     nothing.
//  3. Thrashing detection (AutoMaxDetect). On every ResetEvery-th measured
//     tick, if every measured tick since the previous check was backlogged
//     (otherwise throughput measures demand, not capacity, and nothing is
//     decided), the EWMA throughput T is compared with the best record
//     (bestSize, bestT), m being Margin:
//     - no record yet, or T ≥ bestT·(1+m): record (Size, T) as the best;
//     - T < bestT·(1−m) and Size > bestSize: thrashing. The limit and the
//     target become max(min, bestSize − uniform 0..MaxRandomDrop): the
//     pool is deliberately under-provisioned so that queue-driven growth
//     re-explores sizes around the optimum;
//     - T < bestT·(1−m) and Size < bestSize: under-provisioned after a
//     random drop; the limit is raised back to bestSize;
//     - T < bestT·(1−m) and Size == bestSize: the record is stale (the
//     workload got heavier); the best throughput becomes T;
//     - otherwise (within the margin): if T > bestT and Size ≤ bestSize the
//     record becomes (Size, T) (as good with no more workers); if the pool
//     is at the limit set by a thrash reset, the limit is raised by one so
//     that more concurrency is still probed.
//  4. The target is clamped to [min, limit], limit being max or the limit
//     found by thrashing detection, whichever is smaller.
//
// A Controller is safe for concurrent use: the profiler may read its
// accessors while the pool ticks it.
type Controller struct {
	cfg      ControllerConfig
	min, max int

	mu  sync.Mutex
	rnd *rand.Rand

	primed        bool
	prevNow       time.Time
	prevProcessed uint64
	haveRate      bool
	throughput    float64 // EWMA, events/s

	measured  uint64 // measured ticks
	saturated bool   // every measured tick since the last check was backlogged

	// Growth check (rule 3a): the size a growth started from (0: no
	// growth being judged) and the rate measured at that size.
	stepFrom, stepTo int
	stepRate         float64
	lastRate         float64 // the latest tick's raw rate, events/s

	hasBest  bool
	bestSize int
	bestTP   float64
	limit    int // thrash-detected limit on the size, 0 = none
	resets   uint64

	// lim is limitLocked as of the latest tick, for Limit: admission
	// control (enqueuepred.NewSaturated) reads it on the enqueue path, with
	// the stage's queue locked, where c.mu must not be taken.
	lim atomic.Int32
}

// NewController returns a controller for a pool of min..max workers. A nil
// rnd uses a randomly seeded generator; tests pass a seeded one.
// It panics if cfg is invalid (see [ControllerConfig.Validate]) or the bounds
// are not 0 ≤ min ≤ max, max ≥ 1: configuration loaders validate first.
func NewController(cfg ControllerConfig, min, max int, rnd *rand.Rand) *Controller {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	checkBounds("NewController", min, max)
	if rnd == nil {
		rnd = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	c := &Controller{cfg: cfg.withDefaults(), min: min, max: max, rnd: rnd, saturated: true}
	c.lim.Store(int32(max))
	return c
}

// Config returns the configuration with defaults applied.
func (c *Controller) Config() ControllerConfig {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg
}

// Tick feeds one sample and returns the desired pool size, in [min, max].
func (c *Controller) Tick(s Sample) (target int) {
	c.mu.Lock()
	defer c.mu.Unlock()

	measured := c.measure(s)
	if !c.cfg.Enabled {
		return clamp(s.Size, c.min, c.max)
	}
	backlogged := s.QueueLen >= c.cfg.QueueThreshold
	target = s.Size
	switch {
	case backlogged:
		target = s.Size + 1
	case s.IdleWorkers > 0:
		target = s.Size - s.IdleWorkers
	}
	if c.cfg.AutoMaxDetect && measured {
		target = c.judgeGrowth(s.Size, target, backlogged)
		target = c.detect(s.Size, target, backlogged)
		c.lim.Store(int32(c.limitLocked()))
	}
	return clamp(target, c.min, c.limitLocked())
}

// judgeGrowth applies rule 3a of the Controller documentation: a worker
// added while the stage was backlogged is kept only if the next interval's
// rate shows it working.
func (c *Controller) judgeGrowth(size, target int, backlogged bool) int {
	if !backlogged {
		c.stepFrom = 0 // the rate measures demand, not capacity
		return target
	}
	if from := c.stepFrom; from > 0 {
		c.stepFrom = 0
		old, now := c.stepRate, c.lastRate
		// A quarter of the gain a perfectly parallel stage would show.
		if size == c.stepTo && old > 0 && now < old*(1+0.25*float64(size-from)/float64(from)) {
			c.limit = max(c.min, from, 1)
			if !c.hasBest {
				c.record(from, old)
			}
			c.resets++
			return c.limit
		}
	}
	if target > size {
		c.stepFrom, c.stepTo, c.stepRate = size, target, c.lastRate
	}
	return target
}

// rebase makes the next tick's sample the new baseline of the throughput
// estimate: its driver did not tick for a while (a dormant Pool), and the
// events of that gap say nothing of the stage's capacity.
func (c *Controller) rebase() {
	c.mu.Lock()
	c.primed = false
	c.mu.Unlock()
}

// measure updates the throughput estimate and reports whether s yielded a
// rate.
func (c *Controller) measure(s Sample) bool {
	if !c.primed {
		c.primed, c.prevNow, c.prevProcessed = true, s.Now, s.Processed
		return false
	}
	dt := s.Now.Sub(c.prevNow)
	switch {
	case dt == 0:
		return false // duplicate tick: keep the baseline
	case dt < 0 || s.Processed < c.prevProcessed:
		c.prevNow, c.prevProcessed = s.Now, s.Processed // clock or counter reset
		return false
	}
	rate := float64(s.Processed-c.prevProcessed) / dt.Seconds()
	c.prevNow, c.prevProcessed = s.Now, s.Processed
	c.lastRate = rate
	if !c.haveRate {
		c.throughput, c.haveRate = rate, true
	} else {
		a := 1 - math.Pow(1-c.cfg.Smoothing, float64(dt)/float64(c.cfg.Interval))
		c.throughput += a * (rate - c.throughput)
	}
	return true
}

// detect applies rule 3 of the Controller documentation.
func (c *Controller) detect(size, target int, backlogged bool) int {
	c.measured++
	c.saturated = c.saturated && backlogged
	if c.measured%uint64(c.cfg.ResetEvery) != 0 {
		return target
	}
	saturated := c.saturated
	c.saturated = true
	if !saturated {
		return target
	}
	tp, m := c.throughput, c.cfg.Margin
	switch {
	case !c.hasBest || tp >= c.bestTP*(1+m):
		c.record(size, tp)
	case tp < c.bestTP*(1-m):
		switch {
		case size > c.bestSize:
			drop := 0
			if c.cfg.MaxRandomDrop > 0 {
				drop = c.rnd.IntN(c.cfg.MaxRandomDrop + 1)
			}
			c.limit = max(c.min, c.bestSize-drop, 1)
			c.resets++
			return c.limit
		case size < c.bestSize:
			if c.limit != 0 {
				c.limit = max(c.limit, c.bestSize)
			}
		default:
			c.bestTP = tp
		}
	default:
		if tp > c.bestTP && size <= c.bestSize {
			c.record(size, tp)
		}
		if c.limit != 0 && size >= c.limit && c.limit < c.max {
			c.limit++
		}
	}
	return target
}

func (c *Controller) record(size int, tp float64) {
	c.hasBest, c.bestSize, c.bestTP = true, size, tp
	if c.limit != 0 && c.limit < size {
		c.limit = size
	}
}

func (c *Controller) limitLocked() int {
	if c.limit != 0 && c.limit < c.max {
		return max(c.limit, c.min)
	}
	return c.max
}

// Best returns the best pool size and its throughput (events/s) found by
// thrashing detection; (0, 0) before the first record.
func (c *Controller) Best() (size int, throughput float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bestSize, c.bestTP
}

// Throughput returns the smoothed throughput in events/s (0 until two
// samples have been seen).
func (c *Controller) Throughput() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.throughput
}

// Limit returns the current upper bound on the pool size: max, or the lower
// limit found by thrashing detection. It takes no lock.
func (c *Controller) Limit() int { return int(c.lim.Load()) }

// Resets returns how many times thrashing detection has cut the pool.
func (c *Controller) Resets() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resets
}

func checkBounds(fn string, min, max int) {
	if min < 0 || max < 1 || min > max {
		panic(fmt.Sprintf("threadpool: %s: bad bounds min=%d max=%d (want 0 ≤ min ≤ max, max ≥ 1)", fn, min, max))
	}
}

func clamp(v, lo, hi int) int {
	return max(lo, min(v, hi))
}

package batching

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/ring"
)

// ErrInvalidConfig is wrapped by every error that [Config.Validate] reports.
var ErrInvalidConfig = errors.New("batching: invalid config")

// Defaults (SEDA thesis §5.4.2).
const (
	DefaultMin        = 1
	DefaultMax        = 1000
	DefaultInterval   = time.Second
	DefaultDecrease   = 1.2
	DefaultIncrease   = 1.2
	DefaultKeep       = 0.9
	DefaultRecover    = 0.98
	DefaultResetBelow = 0.2
	DefaultResetAbove = 2.0
	DefaultWindow     = 30
)

// Config configures a batching [Controller]. Its zero value means
// "disabled, defaults everywhere": every zero field takes the default named
// in its comment.
type Config struct {
	// Enabled turns the controller on. A disabled controller still measures
	// throughput but its batch size is fixed at Max.
	Enabled bool `yaml:"enabled"`
	// Min and Max bound the batching factor (0 → 1 and 1000).
	Min int `yaml:"min"`
	Max int `yaml:"max"`
	// Interval is the period the driver calls Observe at (0 → 1s). The
	// controller itself reads time only from Observe's argument.
	Interval time.Duration `yaml:"interval"`
	// Decrease divides the factor at each step down (0 → 1.2), > 1.
	Decrease float64 `yaml:"decrease"`
	// Increase multiplies the factor at each step up (0 → 1.2), > 1.
	Increase float64 `yaml:"increase"`
	// Keep: the factor keeps shrinking while throughput ≥ Keep·best
	// (0 → 0.9), in (0,1).
	Keep float64 `yaml:"keep"`
	// Recover: after a dip the factor grows until throughput ≥
	// Recover·best (0 → 0.98), in (0,1].
	Recover float64 `yaml:"recover"`
	// ResetBelow and ResetAbove: a throughput below ResetBelow·best or above
	// ResetAbove·best means the workload changed; the factor goes back to
	// Max and the best estimate is forgotten (0 → 0.2 and 2).
	ResetBelow float64 `yaml:"resetBelow"`
	ResetAbove float64 `yaml:"resetAbove"`
	// Window is how many observations the best-throughput estimate
	// remembers (0 → 30): "the highest throughput seen in a recent window".
	Window int `yaml:"window"`
}

// Validate reports the first invalid field, wrapping [ErrInvalidConfig].
// Zero fields are valid (they mean default).
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	invalid := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }
	switch {
	case c.Min < 0:
		return bad("min %d is negative", c.Min)
	case c.Max < 0:
		return bad("max %d is negative", c.Max)
	case c.Interval < 0:
		return bad("interval %v is negative", c.Interval)
	case invalid(c.Decrease) || (c.Decrease != 0 && c.Decrease <= 1):
		return bad("decrease %v must be > 1", c.Decrease)
	case invalid(c.Increase) || (c.Increase != 0 && c.Increase <= 1):
		return bad("increase %v must be > 1", c.Increase)
	case invalid(c.Keep) || c.Keep < 0 || c.Keep >= 1:
		return bad("keep %v is outside (0,1)", c.Keep)
	case invalid(c.Recover) || c.Recover < 0 || c.Recover > 1:
		return bad("recover %v is outside (0,1]", c.Recover)
	case invalid(c.ResetBelow) || c.ResetBelow < 0 || c.ResetBelow >= 1:
		return bad("resetBelow %v is outside (0,1)", c.ResetBelow)
	case invalid(c.ResetAbove) || (c.ResetAbove != 0 && c.ResetAbove <= 1):
		return bad("resetAbove %v must be > 1", c.ResetAbove)
	case c.Window < 0:
		return bad("window %d is negative", c.Window)
	}
	d := c.withDefaults()
	switch {
	case d.Min > d.Max:
		return bad("min %d is above max %d", d.Min, d.Max)
	case d.ResetBelow >= d.Keep:
		return bad("resetBelow %v is not below keep %v", d.ResetBelow, d.Keep)
	}
	return nil
}

func (c Config) withDefaults() Config {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Min == 0 {
		c.Min = DefaultMin
	}
	if c.Max == 0 {
		c.Max = DefaultMax
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	def(&c.Decrease, DefaultDecrease)
	def(&c.Increase, DefaultIncrease)
	def(&c.Keep, DefaultKeep)
	def(&c.Recover, DefaultRecover)
	def(&c.ResetBelow, DefaultResetBelow)
	def(&c.ResetAbove, DefaultResetAbove)
	return c
}

type phase uint8

const (
	shrinking phase = iota
	growing
)

// Controller is the SEDA batching controller as a clock-free state
// machine. The stage calls [Controller.Observe] once per Interval with its
// cumulative completion count; workers read [Controller.BatchSize].
//
// Each observation measures rate = ΔProcessed / ΔNow (the first call only
// sets the baseline; a call whose time is not after the previous one is
// ignored; a counter that went backwards re-baselines), then, with best the
// highest rate among the last Window observations:
//
//  1. if rate < ResetBelow·best or rate > ResetAbove·best the workload has
//     changed: the factor is reset to Max, the best estimate is forgotten
//     and the search starts over (this observation, made at the old factor,
//     is discarded);
//  2. a zero rate with no best estimate carries no information: nothing
//     changes;
//  3. shrinking phase (the initial one): while rate ≥ Keep·best the factor
//     is divided by Decrease; otherwise the phase becomes growing and the
//     factor is multiplied by Increase;
//  4. growing phase: once rate ≥ Recover·best the phase becomes shrinking
//     and the factor is held for one interval; if instead the last increase
//     lowered the rate, the optimum was overshot: the phase becomes
//     shrinking and the factor is divided by Decrease; otherwise the
//     factor is multiplied by Increase.
//
// Every step changes the rounded factor by at least one and keeps it in
// [Min, Max]. Like the thesis's controller it does not damp its response,
// so it oscillates just around the smallest factor that sustains the peak.
// A disabled controller keeps the factor at Max.
//
// Observe and the accessors are safe for concurrent use; BatchSize is a
// single atomic load.
type Controller struct {
	size atomic.Int64 // the current batching factor, read on the hot path

	cfg Config

	mu            sync.Mutex
	primed        bool
	prevNow       time.Time
	prevProcessed uint64
	last          float64 // last measured rate, events/s
	prevRate      float64 // rate of the previous decision
	factor        float64 // unrounded batching factor
	phase         phase
	window        *ring.Ring[float64] // recent rates
	resets        uint64
}

// New returns a controller starting at cfg.Max. It panics if cfg is invalid
// (see [Config.Validate]): configuration loaders validate first.
func New(cfg Config) *Controller {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	c := &Controller{cfg: cfg.withDefaults()}
	c.window = ring.New[float64](c.cfg.Window)
	c.setFactor(float64(c.cfg.Max))
	return c
}

// Config returns the configuration with defaults applied.
func (c *Controller) Config() Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg
}

// SetConfig replaces the controller's configuration while it runs, as a
// configuration reload does; Enabled stays as it is (the driver decides
// whether it runs). The factor moves into the new [Min, Max]; when the
// bounds change, the search starts over from Max, as after a workload
// change (the rates measured with the old bounds say nothing about the
// new ones), though Resets does not count it. It returns cfg's error if it is invalid, and changes
// nothing then.
func (c *Controller) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg.Enabled = c.cfg.Enabled
	cfg = cfg.withDefaults()
	rebound := cfg.Min != c.cfg.Min || cfg.Max != c.cfg.Max
	if cfg.Window != c.cfg.Window {
		c.window = ring.New[float64](cfg.Window)
	}
	c.cfg = cfg
	if rebound { // a reset, not counted among the workload changes
		c.window.Clear()
		c.phase, c.prevRate = shrinking, 0
		c.setFactor(float64(c.cfg.Max))
	}
	return nil
}

// BatchSize returns the current batching factor: the most events a handler
// invocation should receive. It is safe and cheap to call from any
// goroutine.
func (c *Controller) BatchSize() int { return int(c.size.Load()) }

// Observe feeds the stage's cumulative count of processed events at time
// now and returns the new batching factor. Call it once per Interval.
func (c *Controller) Observe(now time.Time, processed uint64) (batchSize int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rate, ok := c.measure(now, processed)
	if !ok || !c.cfg.Enabled {
		return c.BatchSize()
	}
	best := c.bestLocked()
	switch {
	case best > 0 && (rate < c.cfg.ResetBelow*best || rate > c.cfg.ResetAbove*best):
		c.reset()
		return c.BatchSize()
	case best == 0 && rate == 0:
		return c.BatchSize()
	}
	c.window.Push(rate)
	best = c.bestLocked()

	switch c.phase {
	case shrinking:
		if rate >= c.cfg.Keep*best {
			c.down()
		} else {
			c.phase = growing
			c.up()
		}
	case growing:
		switch {
		case rate >= c.cfg.Recover*best:
			c.phase = shrinking
		case rate < c.prevRate:
			c.phase = shrinking
			c.down()
		default:
			c.up()
		}
	}
	c.prevRate = rate
	return c.BatchSize()
}

func (c *Controller) measure(now time.Time, processed uint64) (float64, bool) {
	if !c.primed {
		c.primed, c.prevNow, c.prevProcessed = true, now, processed
		return 0, false
	}
	dt := now.Sub(c.prevNow)
	switch {
	case dt == 0:
		return 0, false
	case dt < 0 || processed < c.prevProcessed:
		c.prevNow, c.prevProcessed = now, processed
		return 0, false
	}
	rate := float64(processed-c.prevProcessed) / dt.Seconds()
	c.prevNow, c.prevProcessed, c.last = now, processed, rate
	return rate, true
}

func (c *Controller) reset() {
	c.window.Clear()
	c.phase = shrinking
	c.prevRate = 0
	c.resets++
	c.setFactor(float64(c.cfg.Max))
}

func (c *Controller) bestLocked() float64 {
	best := 0.0
	for _, r := range c.window.All() {
		best = max(best, r)
	}
	return best
}

func (c *Controller) down() {
	cur := math.Round(c.factor)
	f := c.factor / c.cfg.Decrease
	if math.Round(f) >= cur {
		f = cur - 1
	}
	c.setFactor(f)
}

func (c *Controller) up() {
	cur := math.Round(c.factor)
	f := c.factor * c.cfg.Increase
	if math.Round(f) <= cur {
		f = cur + 1
	}
	c.setFactor(f)
}

func (c *Controller) setFactor(f float64) {
	c.factor = math.Max(float64(c.cfg.Min), math.Min(f, float64(c.cfg.Max)))
	c.size.Store(int64(math.Round(c.factor)))
}

// Best returns the current best-throughput estimate in events/s: the
// highest rate in the recent window (0 right after a reset).
func (c *Controller) Best() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bestLocked()
}

// Throughput returns the last measured rate in events/s.
func (c *Controller) Throughput() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// Resets returns how many times a workload change reset the factor to Max.
func (c *Controller) Resets() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resets
}

package enqueuepred

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// CostConfig configures NewCost's predicate. Zero fields take the
// defaults shown.
type CostConfig struct {
	Limit float64 // the most outstanding cost; required
	// Target, if set, makes the limit adaptive (Whirlwind §III.D: the
	// cost budget follows what the stage can actually serve): every
	// Interval with enough completions, the p90 of the completions'
	// response times (queued + service) is compared with Target; above it
	// the limit is cut by a fifth, below half of it while requests were
	// refused the limit grows by a tenth; always within [Min, Max].
	Target   time.Duration
	Interval time.Duration // default: Target, at least 100ms
	Min, Max float64       // default: Limit/100 and Limit*100
	Now      func() time.Time
}

// NewCost returns a predicate admitting events while the estimated cost
// (Costed) of those admitted and not yet handled stays within c.Limit,
// adapted to c.Target if set. Errors wrap ErrBadConfig.
func NewCost(c CostConfig) (sink.Predicate, error) {
	if c.Target == 0 {
		if !(c.Limit > 0) {
			return nil, fmt.Errorf("%w: cost limit must be positive, got %v", ErrBadConfig, c.Limit)
		}
		if c.Interval != 0 || c.Min != 0 || c.Max != 0 {
			return nil, fmt.Errorf("%w: cost interval, min and max need a target (adaptive cost limit)", ErrBadConfig)
		}
		return newCost(c.Limit), nil
	}
	p, err := newAdaptiveCost(c)
	if err != nil {
		return nil, err
	}
	return p, nil
}

type costFeedback struct {
	cfg   CostConfig
	clock monoClock

	mu      sync.Mutex
	rts     []float64
	start   int64
	rejAt   uint64
	lastP90 float64
}

// newAdaptiveCost returns a cost predicate starting at fb.Limit whose limit
// is then adjusted by the feedback fb configures.
func newAdaptiveCost(fb CostConfig) (*costLimit, error) {
	limit := fb.Limit
	if !(limit > 0) {
		return nil, fmt.Errorf("%w: cost limit must be positive, got %v", ErrBadConfig, limit)
	}
	if fb.Target <= 0 {
		return nil, fmt.Errorf("%w: cost feedback needs a positive target, got %v", ErrBadConfig, fb.Target)
	}
	if fb.Interval <= 0 {
		fb.Interval = max(fb.Target, 100*time.Millisecond)
	}
	if fb.Min <= 0 {
		fb.Min = limit / 100
	}
	if fb.Max <= 0 {
		fb.Max = limit * 100
	}
	if fb.Min > fb.Max || limit < fb.Min || limit > fb.Max {
		return nil, fmt.Errorf("%w: cost limit %v outside [min %v, max %v]", ErrBadConfig, limit, fb.Min, fb.Max)
	}
	c := newCost(limit)
	f := &costFeedback{cfg: fb, clock: newMonoClock(fb.Now)}
	f.start = f.clock.ns()
	c.fb = f
	return c, nil
}

// observe records one completion and adjusts c's limit when due.
func (f *costFeedback) observe(c *costLimit, rt time.Duration) {
	now := f.clock.ns()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.rts) < 4096 {
		f.rts = append(f.rts, rt.Seconds())
	}
	if now-f.start < int64(f.cfg.Interval) || len(f.rts) < 10 {
		return
	}
	slices.Sort(f.rts)
	p90 := f.rts[int(0.9*float64(len(f.rts)))]
	f.lastP90 = p90
	target := f.cfg.Target.Seconds()
	rej := c.Rejected()
	limit := c.Limit()
	switch {
	case p90 > target:
		limit *= 0.8
	case p90 < target/2 && rej != f.rejAt:
		limit *= 1.1
	}
	c.SetLimit(min(max(limit, f.cfg.Min), f.cfg.Max))
	f.rts, f.start, f.rejAt = f.rts[:0], now, rej
}

func (f *costFeedback) inspect(report func(string, float64)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	report("p90", f.lastP90)
	report("target", f.cfg.Target.Seconds())
}

var _ sink.Completer = (*costLimit)(nil)

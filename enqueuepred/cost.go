package enqueuepred

import (
	"math"
	"sync/atomic"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/internal/yamlstrict"
	"github.com/sandstorm-go/sandstorm/sink"
)

// Costed is implemented by events that estimate the cost of handling them
// (Whirlwind §III.D): a full-quality image costs more than a thumbnail.
type Costed interface {
	Cost() float64
}

// costOf returns e's estimated cost: its Cost method, else its principal's
// Cost when positive, else 1. Negative costs count as 0.
func costOf(e sink.Event) float64 {
	switch v := e.(type) {
	case Costed:
		return math.Max(v.Cost(), 0)
	case Principaled:
		if c := v.Principal().Cost; c > 0 {
			return c
		}
	}
	return 1
}

// costUnit is the resolution of Cost's accounting.
const costUnit = 1000

func costUnits(e sink.Event) int64 { return int64(math.Round(costOf(e) * costUnit)) }

// costLimit admits an event while the estimated cost of the events it admitted
// and that are not yet handled, this one included, stays within a limit
// (Whirlwind §III.D: "the cost of un-handled messages never exceeds a
// threshold"). Under load it refuses expensive requests first and still
// admits cheap ones, so a sender can fall back to a cheaper variant (a
// low-quality image) before answering 503. Like Counter, it gets its cost
// back through sink.Done (also on failure) or sink.Cancel.
type costLimit struct {
	counts
	limit       atomic.Int64 // in cost units
	outstanding atomic.Int64
	fb          *costFeedback // nil: fixed limit (costfb.go)
}

var (
	_ sink.Completer = (*costLimit)(nil)
	_ sink.Canceler  = (*costLimit)(nil)
	_ charger        = (*costLimit)(nil)
)

// newCost returns a predicate admitting up to limit of outstanding cost.
func newCost(limit float64) *costLimit {
	c := &costLimit{}
	c.SetLimit(limit)
	return c
}

// Name implements sink.Namer.
func (c *costLimit) Name() string { return "cost" }

// Accept implements sink.Predicate.
func (c *costLimit) Accept(e sink.Event) bool {
	if c.take(costUnits(e)) {
		return c.yes()
	}
	if sink.IsNonRejectable(e) {
		c.charge(e)
		return true
	}
	return c.no()
}

func (c *costLimit) take(units int64) bool {
	limit := c.limit.Load()
	for {
		n := c.outstanding.Load()
		if n+units > limit {
			return false
		}
		if c.outstanding.CompareAndSwap(n, n+units) {
			return true
		}
	}
}

// charge implements charger: e's cost is taken even beyond the limit.
func (c *costLimit) charge(e sink.Event) {
	c.outstanding.Add(costUnits(e))
	c.accepted.Add(1)
}

// Done implements sink.Completer: e's cost comes back.
func (c *costLimit) Done(e sink.Event, queued, service time.Duration) {
	c.release(costUnits(e))
	if c.fb != nil {
		c.fb.observe(c, queued+service)
	}
}

// Cancel implements sink.Canceler: e's cost comes back.
func (c *costLimit) Cancel(e sink.Event) { c.release(costUnits(e)) }

func (c *costLimit) release(units int64) {
	for {
		n := c.outstanding.Load()
		next := max(n-units, 0)
		if c.outstanding.CompareAndSwap(n, next) {
			return
		}
	}
}

// SetLimit changes the limit while traffic flows.
func (c *costLimit) SetLimit(limit float64) {
	c.limit.Store(int64(math.Round(math.Max(limit, 0) * costUnit)))
}

// Limit returns the limit.
func (c *costLimit) Limit() float64 { return float64(c.limit.Load()) / costUnit }

// Outstanding returns the cost admitted and not yet handled.
func (c *costLimit) Outstanding() float64 { return float64(c.outstanding.Load()) / costUnit }

// Inspect implements Inspector.
func (c *costLimit) Inspect(report func(string, float64)) {
	report("limit", c.Limit())
	report("outstanding", c.Outstanding())
	if c.fb != nil {
		c.fb.inspect(report)
	}
	c.inspect(report)
}

// buildCost reads {type: cost, limit: L} and, adaptive, {..., target: 100ms,
// interval, min, max}.
func buildCost(n *yaml.Node, path string, env Env) (sink.Predicate, error) {
	var c struct {
		Limit    *float64      `yaml:"limit"`
		Target   time.Duration `yaml:"target"`
		Interval time.Duration `yaml:"interval"`
		Min      float64       `yaml:"min"`
		Max      float64       `yaml:"max"`
	}
	if err := decode(n, path, &c); err != nil {
		return nil, err
	}
	if c.Limit == nil {
		return nil, yamlstrict.Errorf(n, yamlstrict.Join(path, "limit"), "cost needs a limit (the most outstanding cost)")
	}
	if !(*c.Limit > 0) {
		return nil, yamlstrict.Errorf(at(n, "limit"), yamlstrict.Join(path, "limit"), "limit must be positive, got %v", *c.Limit)
	}
	if c.Target == 0 {
		for _, k := range []string{"interval", "min", "max"} {
			if child(n, k) != nil {
				return nil, yamlstrict.Errorf(at(n, k), yamlstrict.Join(path, k), "%s needs a target (adaptive cost limit)", k)
			}
		}
		return newCost(*c.Limit), nil
	}
	p, err := newAdaptiveCost(CostConfig{Limit: *c.Limit, Target: c.Target, Interval: c.Interval, Min: c.Min, Max: c.Max, Now: env.Now})
	if err != nil {
		return nil, yamlstrict.Errorf(n, path, "%v", err)
	}
	return p, nil
}

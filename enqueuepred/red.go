package enqueuepred

import (
	"math/rand/v2"
	"sync"

	"github.com/sandstorm-go/sandstorm/sink"
)

// REDConfig configures random early detection (Floyd & Jacobson 1993)
// applied to a stage's queue. Zero fields take the defaults shown.
type REDConfig struct {
	Min    float64 // average length where dropping starts; default 100
	Max    float64 // average length where dropping reaches MaxP; default 3*Min
	MaxP   float64 // drop probability at Max; default 0.1
	Weight float64 // EWMA weight of each new length sample; default 0.002
	// Gentle makes the probability rise linearly from MaxP to 1 between Max
	// and 2*Max instead of jumping to 1 at Max.
	Gentle bool
	Rand   func() float64 // uniform in [0,1); nil: math/rand/v2
}

// red rejects events with a probability that grows with the average length
// of the queue it guards: none below Min, rising linearly to MaxP at Max,
// all above Max (or 2*Max when Gentle). Spacing drops uniformly, as in
// RED's count correction, avoids bursts of rejections. Unbound, it accepts
// everything.
type red struct {
	boundSink
	counts
	mu    sync.Mutex
	cfg   REDConfig
	avg   float64
	count int // accepted since the last drop while between Min and Max
	rnd   func() float64
}

// NewRED returns a random early detection predicate (YAML `red`): it
// rejects events with a probability that grows with the average length of
// the queue it guards, none below Min, rising linearly to MaxP at Max, all
// above Max (or 2*Max when Gentle). Unbound, it accepts everything.
func NewRED(c REDConfig) sink.Predicate { return newRED(c) }

// newRED is NewRED, returning the concrete type.
func newRED(c REDConfig) *red {
	r := &red{}
	r.SetConfig(c)
	return r
}

func (c REDConfig) withDefaults() REDConfig {
	if c.Min <= 0 {
		c.Min = 100
	}
	if c.Max <= c.Min {
		c.Max = 3 * c.Min
	}
	if c.MaxP <= 0 || c.MaxP > 1 {
		c.MaxP = 0.1
	}
	if c.Weight <= 0 || c.Weight > 1 {
		c.Weight = 0.002
	}
	return c
}

// SetConfig replaces the parameters while traffic flows; the average is kept.
func (r *red) SetConfig(c REDConfig) {
	c = c.withDefaults()
	r.mu.Lock()
	r.cfg = c
	r.rnd = c.Rand
	if r.rnd == nil {
		r.rnd = rand.Float64
	}
	r.mu.Unlock()
}

// Config returns the parameters in force.
func (r *red) Config() REDConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg
}

// Name implements sink.Namer.
func (r *red) Name() string { return "red" }

// Accept implements sink.Predicate.
func (r *red) Accept(e sink.Event) bool {
	n := r.len()
	if n < 0 {
		return r.yes()
	}
	r.mu.Lock()
	c := r.cfg
	r.avg += c.Weight * (float64(n) - r.avg)
	var pb float64
	switch {
	case r.avg < c.Min:
		pb = 0
	case r.avg < c.Max:
		pb = c.MaxP * (r.avg - c.Min) / (c.Max - c.Min)
	case c.Gentle && r.avg < 2*c.Max:
		pb = c.MaxP + (1-c.MaxP)*(r.avg-c.Max)/c.Max
	default:
		pb = 1
	}
	drop := false
	switch {
	case pb <= 0:
		r.count = 0
	case pb >= 1:
		drop = true
	default:
		r.count++
		pa := pb / max(1-float64(r.count)*pb, pb)
		drop = r.rnd() < pa
	}
	if drop {
		r.count = 0
	}
	r.mu.Unlock()
	if drop && !sink.IsNonRejectable(e) {
		return r.no()
	}
	return r.yes()
}

// charge implements charger.
func (r *red) charge(sink.Event) { r.accepted.Add(1) }

// Average returns the current average queue length.
func (r *red) Average() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.avg
}

// Inspect implements Inspector.
func (r *red) Inspect(report func(string, float64)) {
	report("average", r.Average())
	report("length", float64(r.len()))
	r.inspect(report)
}

package enqueuepred

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// counter admits at most limit events in service at once (JOBS §7.2.1, a
// credit system). An admitted event holds a credit until the runtime reports
// its completion through sink.Done (also when the handler failed) or the
// queue cancels it (sink.Cancel).
//
// The runtime must report every admitted event exactly once: a Done for an
// event this counter did not admit (say, after the stage's predicate was
// replaced) returns a credit it never gave, so a counter never goes below
// zero but may briefly admit more than limit.
type counter struct {
	counts
	inflight  atomic.Int64
	effective atomic.Int64

	mu      sync.Mutex // serializes setters
	nominal int
	scale   float64
}

var (
	_ sink.Completer = (*counter)(nil)
	_ sink.Canceler  = (*counter)(nil)
	_ scalable       = (*counter)(nil)
	_ charger        = (*counter)(nil)
)

// NewCounter returns a credit counter (JOBS §7.2.1, YAML `counter`)
// admitting at most limit events in service at once: an admitted event
// holds a credit until the runtime reports its completion (sink.Done, also
// when the handler failed) or the queue cancels it (sink.Cancel).
func NewCounter(limit int) sink.Predicate { return newCounter(limit) }

// newCounter is NewCounter, returning the concrete type.
func newCounter(limit int) *counter {
	c := &counter{nominal: limit, scale: 1}
	c.effective.Store(int64(limit))
	return c
}

// Name implements sink.Namer.
func (c *counter) Name() string { return "counter" }

// Accept implements sink.Predicate.
func (c *counter) Accept(e sink.Event) bool {
	limit := c.effective.Load()
	for {
		n := c.inflight.Load()
		if n >= limit {
			if sink.IsNonRejectable(e) {
				c.charge(e)
				return true
			}
			return c.no()
		}
		if c.inflight.CompareAndSwap(n, n+1) {
			return c.yes()
		}
	}
}

// charge implements charger: it takes a credit even beyond the limit.
func (c *counter) charge(sink.Event) {
	c.inflight.Add(1)
	c.accepted.Add(1)
}

// Done implements sink.Completer: the credit comes back.
func (c *counter) Done(e sink.Event, _, _ time.Duration) { c.release() }

// Cancel implements sink.Canceler: the credit comes back.
func (c *counter) Cancel(sink.Event) { c.release() }

func (c *counter) release() {
	for {
		n := c.inflight.Load()
		if n <= 0 {
			return
		}
		if c.inflight.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// InFlight returns the number of credits held.
func (c *counter) InFlight() int { return int(c.inflight.Load()) }

// SetLimit changes the nominal limit while traffic flows. Events already in
// service keep their credits.
func (c *counter) SetLimit(limit int) {
	c.mu.Lock()
	c.nominal = limit
	c.applyLocked()
	c.mu.Unlock()
}

// Limit returns the nominal limit.
func (c *counter) Limit() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nominal
}

// EffectiveLimit returns the limit in force.
func (c *counter) EffectiveLimit() int { return int(c.effective.Load()) }

// Scale implements scalable.
func (c *counter) Scale(f float64) {
	c.mu.Lock()
	c.scale = clamp01(f)
	c.applyLocked()
	c.mu.Unlock()
}

func (c *counter) applyLocked() {
	c.effective.Store(int64(math.Floor(float64(c.nominal) * c.scale)))
}

// Inspect implements Inspector.
func (c *counter) Inspect(report func(string, float64)) {
	report("limit", float64(c.effective.Load()))
	report("inflight", float64(c.inflight.Load()))
	c.inspect(report)
}

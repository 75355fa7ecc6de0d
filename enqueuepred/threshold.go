package enqueuepred

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/sandstorm-go/sandstorm/sink"
)

// threshold rejects events while the queue it guards holds limit events or
// more (Sandstorm's QueueThresholdPredicate). It learns the queue through
// sink.Binder when installed with SetPredicate; unbound, it accepts
// everything.
type threshold struct {
	boundSink
	counts
	effective atomic.Int64

	mu      sync.Mutex // serializes setters
	nominal int
	scale   float64
}

var (
	_ sink.Binder = (*threshold)(nil)
	_ scalable    = (*threshold)(nil)
	_ Inspector   = (*threshold)(nil)
)

// NewThreshold returns a predicate (YAML `threshold`) rejecting events
// while the queue it guards holds limit events or more (Sandstorm's
// QueueThresholdPredicate); limit <= 0 rejects every rejectable event. It
// learns the queue through sink.Binder when installed with SetPredicate;
// unbound, it accepts everything.
func NewThreshold(limit int) sink.Predicate { return newThreshold(limit) }

// newThreshold is NewThreshold, returning the concrete type.
func newThreshold(limit int) *threshold {
	t := &threshold{nominal: limit, scale: 1}
	t.effective.Store(int64(limit))
	return t
}

// Name implements sink.Namer.
func (t *threshold) Name() string { return "threshold" }

// Accept implements sink.Predicate.
func (t *threshold) Accept(e sink.Event) bool {
	if n := t.len(); n >= 0 && int64(n) >= t.effective.Load() && !sink.IsNonRejectable(e) {
		return t.no()
	}
	return t.yes()
}

// charge implements charger (a threshold holds nothing per event).
func (t *threshold) charge(sink.Event) { t.accepted.Add(1) }

// SetLimit changes the nominal limit while traffic flows.
func (t *threshold) SetLimit(limit int) {
	t.mu.Lock()
	t.nominal = limit
	t.applyLocked()
	t.mu.Unlock()
}

// Limit returns the nominal limit.
func (t *threshold) Limit() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nominal
}

// EffectiveLimit returns the limit in force (nominal scaled by modifiers).
func (t *threshold) EffectiveLimit() int { return int(t.effective.Load()) }

// Scale implements scalable.
func (t *threshold) Scale(f float64) {
	t.mu.Lock()
	t.scale = clamp01(f)
	t.applyLocked()
	t.mu.Unlock()
}

func (t *threshold) applyLocked() {
	t.effective.Store(int64(math.Floor(float64(t.nominal) * t.scale)))
}

// Inspect implements Inspector.
func (t *threshold) Inspect(report func(string, float64)) {
	report("limit", float64(t.effective.Load()))
	report("length", float64(t.len()))
	t.inspect(report)
}

func clamp01(f float64) float64 {
	if f != f || f < 0 { // NaN or negative
		return 0
	}
	if f > 1 {
		return 1
	}
	return f
}

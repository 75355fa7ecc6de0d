package enqueuepred

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// Step is an entry of a Modifier's template (JOBS §7.8). In
// Modifier.Value, from sample value At upward the overload degree is
// Degree; in Modifier.Duration, once overload has lasted After, it is
// Degree.
type Step struct {
	At     float64       // Value steps: the sample value
	After  time.Duration // Duration steps: how long overload has lasted
	Degree float64
}

// Modifier reduces a regulator's limit by Factor percent per degree of
// overload that Sampler's readings reach in its template (JOBS §7.2.4,
// §7.8), given by value or by duration, not both. By value, the degree is
// that of the highest step of Value whose At the sample reaches (CPU
// template {80: 1, 90: 2, 100: 3}). By duration, the indicator is
// overloaded while the sample is >= Over, and the degree is that of the
// highest step of Duration whose After the overload has lasted ({0s: 1,
// 30s: 2}). Outside every step the degree is 0.
type Modifier struct {
	Sampler  Sampler // NewSampler makes the built-in ones
	Value    []Step
	Over     float64
	Duration []Step
	Factor   float64       // percent of the nominal limit per degree; default 10
	Interval time.Duration // time between samples; default 1s
}

func (t Modifier) validate() error {
	if (len(t.Value) == 0) == (len(t.Duration) == 0) {
		return fmt.Errorf("%w: a template needs value steps or duration steps, not both", ErrBadConfig)
	}
	for _, s := range t.Value {
		if s.Degree < 0 || math.IsNaN(s.At) {
			return fmt.Errorf("%w: bad template step %v", ErrBadConfig, s)
		}
	}
	for _, s := range t.Duration {
		if s.Degree < 0 || s.After < 0 {
			return fmt.Errorf("%w: bad template step %v", ErrBadConfig, s)
		}
	}
	return nil
}

// degreeAt returns the degree for value v at now; since is when the
// current overload started (zero: none) and is updated.
func (t Modifier) degreeAt(v float64, now time.Time, since *time.Time) float64 {
	if len(t.Value) > 0 {
		d := 0.0
		best := math.Inf(-1)
		for _, s := range t.Value {
			if v >= s.At && s.At > best {
				best, d = s.At, s.Degree
			}
		}
		return d
	}
	if v < t.Over {
		*since = time.Time{}
		return 0
	}
	if since.IsZero() {
		*since = now
	}
	lasted := now.Sub(*since)
	d := 0.0
	best := time.Duration(-1)
	for _, s := range t.Duration {
		if lasted >= s.After && s.After > best {
			best, d = s.After, s.Degree
		}
	}
	return d
}

// ModifiedConfig configures NewModified's regulator.
type ModifiedConfig struct {
	Modifiers []Modifier
	Now       func() time.Time // nil: time.Now
	Logger    *slog.Logger     // nil: discard; sampler failures are logged here
}

// modified applies sampler-driven modifiers to a Scalable regulator: the
// reductions of all modifiers add up (capped at 100%) and scale the
// regulator's nominal limit. While Run runs (the stage runtime runs it for
// every modified of a stage's predicate tree, nested in composites too)
// the modifiers are sampled in the background, never by a decision: a
// sampler may read /proc or compute percentiles, and a decision runs
// under the stage's queue lock. Without Run (a modified used on its own,
// outside a stage) sampling is lazy: a decision that finds a modifier due
// samples it, at most one goroutine at a time.
type modified struct {
	inner      scalable
	kids       []sink.Predicate // inner, for Children
	mods       []modState
	clock      monoClock
	log        *slog.Logger
	next       atomic.Int64 // clock ns when some modifier is due
	background atomic.Int32 // Run loops sampling
	fed        []eventFed   // the samplers fed by events (eventsampler.go)

	mu    sync.Mutex
	scale float64
}

type modState struct {
	Modifier
	next    time.Time
	since   time.Time
	value   float64
	degree  float64
	errors  uint64
	lastErr string
}

var (
	_ sink.Composite = (*modified)(nil)
	_ sink.Completer = (*modified)(nil)
)

// NewModified applies sampler-driven modifiers to inner, a regulator whose
// limit can be scaled down: one made by NewRate, NewCounter or
// NewThreshold, a group rate (Shared.Group), or any predicate with a
// method Scale(f float64) taking f in [0, 1] (1: the nominal limit). The
// reductions of all modifiers add up (capped at 100%) and scale the
// regulator's nominal limit. Under a stage the runtime samples the
// modifiers in the background (they may read /proc or compute
// percentiles), never inside a decision; used on its own, outside a
// stage, a decision that finds a modifier due samples it. Errors wrap
// ErrBadConfig.
func NewModified(inner sink.Predicate, c ModifiedConfig) (sink.Predicate, error) {
	sc, ok := inner.(scalable)
	if !ok && inner != nil {
		return nil, fmt.Errorf("%w: modifiers need a scalable regulator (rate, counter, threshold, group), not %s", ErrBadConfig, sink.PredicateName(inner))
	}
	m, err := newModified(sc, c) // sc nil: the error for a missing regulator
	if err != nil {
		return nil, err
	}
	return m, nil
}

// newModified is NewModified, returning the concrete type.
func newModified(inner scalable, c ModifiedConfig) (*modified, error) {
	if inner == nil {
		return nil, fmt.Errorf("%w: modifiers need a regulator", ErrBadConfig)
	}
	m := &modified{inner: inner, kids: []sink.Predicate{inner}, clock: newMonoClock(c.Now), log: c.Logger, scale: 1}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	for i, mod := range c.Modifiers {
		if mod.Sampler == nil {
			return nil, fmt.Errorf("%w: modifier %d has no sampler", ErrBadConfig, i)
		}
		if err := mod.validate(); err != nil {
			return nil, fmt.Errorf("modifier %d (%s): %w", i, mod.Sampler.Name(), err)
		}
		if mod.Factor == 0 {
			mod.Factor = 10
		}
		if mod.Factor < 0 {
			return nil, fmt.Errorf("%w: modifier %d: negative factor", ErrBadConfig, i)
		}
		if mod.Interval <= 0 {
			mod.Interval = time.Second
		}
		mod.Value = slices.Clone(mod.Value)
		mod.Duration = slices.Clone(mod.Duration)
		m.mods = append(m.mods, modState{Modifier: mod})
		if f, ok := mod.Sampler.(eventFed); ok {
			m.fed = append(m.fed, f)
		}
	}
	return m, nil
}

// Name implements sink.Namer.
func (m *modified) Name() string { return sink.PredicateName(m.inner) }

// Children implements sink.Composite: the regulator.
func (m *modified) Children() []sink.Predicate { return m.kids }

// Accept implements sink.Predicate.
func (m *modified) Accept(e sink.Event) bool {
	if m.background.Load() == 0 {
		m.maybeUpdate()
	}
	for _, f := range m.fed {
		f.Arrived(e)
	}
	return m.inner.Accept(e)
}

// Run samples the modifiers when they are due until ctx ends, so that
// decisions never do (see Modified).
func (m *modified) Run(ctx context.Context) {
	m.background.Add(1)
	defer m.background.Add(-1)
	for {
		m.Update()
		// Sleep until the next modifier is due (by the predicate's clock),
		// looking again at least every second.
		wait := min(max(time.Duration(m.next.Load()-m.clock.ns()), time.Millisecond), time.Second)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Update samples every due modifier now and rescales the regulator. Accept
// does this by itself; Update is for callers that want a fresh reading.
func (m *modified) Update() {
	m.mu.Lock()
	m.updateLocked(m.clock.ns())
	m.mu.Unlock()
}

func (m *modified) maybeUpdate() {
	if now := m.clock.ns(); now >= m.next.Load() && m.mu.TryLock() {
		m.updateLocked(now)
		m.mu.Unlock()
	}
}

func (m *modified) updateLocked(ns int64) {
	now := m.clock.at(ns)
	next := time.Time{}
	reduction := 0.0
	for i := range m.mods {
		s := &m.mods[i]
		if !now.Before(s.next) {
			s.next = now.Add(s.Interval)
			v, err := s.Sampler.Sample(now)
			if err != nil {
				s.errors++
				if msg := err.Error(); msg != s.lastErr {
					s.lastErr = msg
					m.log.Warn("load sampler failed; keeping its last degree", "sampler", s.Sampler.Name(), "err", err)
				}
			} else {
				s.lastErr = ""
				s.value = v
				s.degree = s.degreeAt(v, now, &s.since)
			}
		}
		reduction += s.degree * s.Factor
		if next.IsZero() || s.next.Before(next) {
			next = s.next
		}
	}
	scale := clamp01(1 - reduction/100)
	if scale != m.scale {
		m.log.Debug("overload modifiers", "regulator", m.Name(), "scale", scale)
		m.scale = scale
		m.inner.Scale(scale)
	}
	if !next.IsZero() {
		m.next.Store(int64(next.Sub(m.clock.origin)))
	}
}

// Scale returns the factor currently applied to the regulator's limit.
func (m *modified) Scale() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.scale
}

// Degree returns the current overload degree of modifier i.
func (m *modified) Degree(i int) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mods[i].degree
}

// charge implements charger.
func (m *modified) charge(e sink.Event) { charge(m.inner, e) }

// Done implements sink.Completer: it feeds the event-fed samplers. The
// regulator gets its own Done from the sink (sink.Composite).
func (m *modified) Done(e sink.Event, queued, service time.Duration) {
	for _, f := range m.fed {
		f.Completed(e, queued, service)
	}
}

// Inspect implements Inspector: the regulator's state, the scale, and per
// modifier ("mod<i>.") the last value, the degree and sampler errors.
func (m *modified) Inspect(report func(string, float64)) {
	inspect(m.inner, report)
	m.mu.Lock()
	defer m.mu.Unlock()
	report("scale", m.scale)
	for i, s := range m.mods {
		p := fmt.Sprintf("mod%d.", i)
		report(p+"value", s.value)
		report(p+"degree", s.degree)
		report(p+"errors", float64(s.errors))
	}
}

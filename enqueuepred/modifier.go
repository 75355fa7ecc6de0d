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

// Step is an entry of a by-value template: from value At upward the
// overload degree is Degree.
type Step struct {
	At     float64
	Degree float64
}

// DurationStep is an entry of a by-duration template: once overload has
// lasted After, the degree is Degree.
type DurationStep struct {
	After  time.Duration
	Degree float64
}

// Template turns samples into an overload degree (JOBS §7.8), by value or by
// duration. By value, the degree is that of the highest step whose At the
// sample reaches (CPU template {80: 1, 90: 2, 100: 3}). By duration, the
// indicator is overloaded while the sample is >= Over, and the degree is that
// of the highest step whose After the overload has lasted ({0s: 1, 30s: 2}).
// Outside every step the degree is 0.
type Template struct {
	Value    []Step
	Over     float64
	Duration []DurationStep
}

func (t Template) validate() error {
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

// degree returns the degree for value v at now; since is when the current
// overload started (zero: none) and is updated.
func (t Template) degree(v float64, now time.Time, since *time.Time) float64 {
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

// Modifier reduces a regulator's limit by Factor percent per degree of
// overload that Sampler's readings reach in Template (JOBS §7.2.4).
type Modifier struct {
	Sampler  Sampler
	Template Template
	Factor   float64       // percent of the nominal limit per degree; default 10
	Interval time.Duration // time between samples; default 1s
}

// ModifiedConfig configures a Modified regulator.
type ModifiedConfig struct {
	Modifiers []Modifier
	Now       func() time.Time // nil: time.Now
	Logger    *slog.Logger     // nil: discard; sampler failures are logged here
}

// Modified applies sampler-driven modifiers to a Scalable regulator: the
// reductions of all modifiers add up (capped at 100%) and scale the
// regulator's nominal limit. While Run runs (the stage runtime runs it for
// a stage's own predicate) the modifiers are sampled in the background,
// never by a decision: a sampler may read /proc or compute percentiles,
// and a decision runs under the stage's queue lock. Without Run (a
// Modified nested in a composite, or used on its own) sampling is lazy: a
// decision that finds a modifier due samples it, at most one goroutine at a
// time.
type Modified struct {
	inner      Scalable
	kids       []sink.Predicate // inner, for Children
	mods       []modState
	clock      monoClock
	log        *slog.Logger
	next       atomic.Int64 // clock ns when some modifier is due
	background atomic.Int32 // Run loops sampling
	fed        []EventFed   // the samplers fed by events (eventsampler.go)

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
	_ sink.Composite = (*Modified)(nil)
	_ sink.Completer = (*Modified)(nil)
)

// NewModified wraps inner with modifiers.
func NewModified(inner Scalable, c ModifiedConfig) (*Modified, error) {
	if inner == nil {
		return nil, fmt.Errorf("%w: modifiers need a regulator", ErrBadConfig)
	}
	m := &Modified{inner: inner, kids: []sink.Predicate{inner}, clock: newMonoClock(c.Now), log: c.Logger, scale: 1}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	for i, mod := range c.Modifiers {
		if mod.Sampler == nil {
			return nil, fmt.Errorf("%w: modifier %d has no sampler", ErrBadConfig, i)
		}
		if err := mod.Template.validate(); err != nil {
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
		mod.Template.Value = slices.Clone(mod.Template.Value)
		mod.Template.Duration = slices.Clone(mod.Template.Duration)
		m.mods = append(m.mods, modState{Modifier: mod})
		if f, ok := mod.Sampler.(EventFed); ok {
			m.fed = append(m.fed, f)
		}
	}
	return m, nil
}

// Name implements sink.Namer.
func (m *Modified) Name() string { return sink.PredicateName(m.inner) }

// Children implements sink.Composite: the regulator.
func (m *Modified) Children() []sink.Predicate { return m.kids }

// Inner returns the modified regulator.
func (m *Modified) Inner() Scalable { return m.inner }

// Accept implements sink.Predicate.
func (m *Modified) Accept(e sink.Event) bool {
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
func (m *Modified) Run(ctx context.Context) {
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
func (m *Modified) Update() {
	m.mu.Lock()
	m.updateLocked(m.clock.ns())
	m.mu.Unlock()
}

func (m *Modified) maybeUpdate() {
	if now := m.clock.ns(); now >= m.next.Load() && m.mu.TryLock() {
		m.updateLocked(now)
		m.mu.Unlock()
	}
}

func (m *Modified) updateLocked(ns int64) {
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
				s.degree = s.Template.degree(v, now, &s.since)
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
func (m *Modified) Scale() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.scale
}

// Degree returns the current overload degree of modifier i.
func (m *Modified) Degree(i int) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mods[i].degree
}

// charge implements charger.
func (m *Modified) charge(e sink.Event) { charge(m.inner, e) }

// Done implements sink.Completer: it feeds the event-fed samplers. The
// regulator gets its own Done from the sink (sink.Composite).
func (m *Modified) Done(e sink.Event, queued, service time.Duration) {
	for _, f := range m.fed {
		f.Completed(e, queued, service)
	}
}

// Inspect implements Inspector: the regulator's state, the scale, and per
// modifier ("mod<i>.") the last value, the degree and sampler errors.
func (m *Modified) Inspect(report func(string, float64)) {
	Inspect(m.inner, report)
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

package enqueuepred

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// The service-degradation controller lives here, beside ResponseTime,
// rather than in an application or a package of its own: it is a
// controller of the same kind (it reads a stage's p90 and its target and
// switches that controller's admission on and off), it needs nothing but
// ResponseTime and the standard library, and every application with a
// quality knob (Haboob's Checksum, Arashi's pages) uses it the same way.

// DegraderConfig configures a Degrader. Zero fields take the defaults
// shown.
type DegraderConfig struct {
	Min      float64       // lowest quality, in (0, 1] (default 0.05)
	Increase float64       // quality added per period under target (default 0.02)
	Decrease float64       // quality divided by this per period over target (default 1.25)
	Interval time.Duration // adjustment period (default 100ms)
	// Admission lets the controller switch its ResponseTime's admission
	// control: off at construction (degrade first), on when the quality
	// is at Min and the response time still exceeds the target, off again
	// once the response time is below half the target (thesis §7.3.4,
	// Fig. 57). False leaves the ResponseTime as configured.
	Admission bool
	Logger    *slog.Logger // admission switches are logged at INFO; nil: discard
}

// Degrader is the service-degradation controller of the SEDA thesis
// (§7.2.2, §7.3.4): a stage reads its 90th-percentile response time and
// lowers a quality factor (less work per request) while it exceeds the
// target, raises it slowly while it is below, and, at the lowest quality,
// asks for admission control to be switched back on.
//
// A handler calls Observe(now) per request (or batch) and does quality ×
// its full work; Observe reads the p90 and the target from the stage's
// ResponseTime predicate and applies the admission wish to it. It reads
// time only from its argument, so it is tested on a fake clock; it starts
// no goroutine. It is safe for concurrent use.
type Degrader struct {
	cfg DegraderConfig
	rt  *ResponseTime // nil: fed through Update only

	mu       sync.Mutex
	q        float64
	last     time.Time
	admit    bool
	pressure bool // SetPressure's; the ResponseTime's counts too
}

// NewDegrader returns a controller at full quality with admission off,
// driving rt (the stage's response-time predicate, see ResponseTimeOf).
// With cfg.Admission it disables rt's admission control at once. rt may
// be nil: the caller then feeds measurements with Update and applies
// Admission itself.
func NewDegrader(rt *ResponseTime, cfg DegraderConfig) (*Degrader, error) {
	if cfg.Min == 0 {
		cfg.Min = 0.05
	}
	if cfg.Increase == 0 {
		cfg.Increase = 0.02
	}
	if cfg.Decrease == 0 {
		cfg.Decrease = 1.25
	}
	if cfg.Interval == 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case !(cfg.Min > 0 && cfg.Min <= 1):
		return nil, fmt.Errorf("%w: degrader min quality %v not in (0, 1]", ErrBadConfig, cfg.Min)
	case !(cfg.Increase >= 0 && cfg.Increase <= 1):
		return nil, fmt.Errorf("%w: degrader increase %v not in [0, 1]", ErrBadConfig, cfg.Increase)
	case !(cfg.Decrease >= 1):
		return nil, fmt.Errorf("%w: degrader decrease %v must be >= 1", ErrBadConfig, cfg.Decrease)
	case cfg.Interval < 0:
		return nil, fmt.Errorf("%w: degrader interval %v is negative", ErrBadConfig, cfg.Interval)
	}
	if rt != nil && cfg.Admission {
		rt.Disable() // degrade first; admission control comes back at the lowest quality
	}
	return &Degrader{cfg: cfg, rt: rt, q: 1}, nil
}

// ResponseTimeOf returns the first ResponseTime in p's tree (in sink.Walk's
// order), or nil: the predicate a Degrader reads on a stage.
func ResponseTimeOf(p sink.Predicate) *ResponseTime {
	var found *ResponseTime
	sink.Walk(p, func(q sink.Predicate) {
		if rt, ok := q.(*ResponseTime); ok && found == nil {
			found = rt
		}
	})
	return found
}

// Quality returns the current quality factor in [Min, 1].
func (d *Degrader) Quality() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.q
}

// Admission reports whether the controller wants admission control on.
func (d *Degrader) Admission() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.admit
}

// PressureTaker is implemented by predicates that take resource pressure:
// the runtime's memory monitor (stage.SignalMemory) puts every stage's
// predicates under pressure while memory is high.
type PressureTaker interface {
	SetPressure(on bool)
}

// SetPressure tells the ResponseTime that the process is short of a
// resource (memory): a Degrader driving it serves at its lowest quality
// until the pressure is lifted. Admission is not changed.
func (r *ResponseTime) SetPressure(on bool) { r.pressure.Store(on) }

// Pressure reports whether SetPressure put r under pressure.
func (r *ResponseTime) Pressure() bool { return r.pressure.Load() }

// SetPressure puts the controller under resource pressure (or lifts it),
// for a Degrader without a ResponseTime; with one, the ResponseTime's
// pressure counts too. Under pressure Observe and Update return the
// lowest quality at once; once lifted, the quality climbs back by
// Increase per Interval as usual.
func (d *Degrader) SetPressure(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pressure = on
	if on {
		d.q = d.cfg.Min
	}
}

// Observe runs the controller at time now on its ResponseTime's current
// p90 and target, and returns the quality to serve at. Without a
// ResponseTime it returns the current quality.
func (d *Degrader) Observe(now time.Time) float64 {
	rt := d.ResponseTime()
	if rt == nil {
		return d.Quality()
	}
	q, _ := d.Update(now, rt.P90(), rt.Target())
	return q
}

// ResponseTime returns the ResponseTime the controller drives (nil if
// none): the one given to NewDegrader or the last Retarget.
func (d *Degrader) ResponseTime() *ResponseTime {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rt
}

// Retarget makes the controller drive rt from now on, keeping its
// quality and admission wish: a configuration reload that replaced the
// stage's predicate (stage.SignalReloaded) hands the new ResponseTime
// over. With Admission the wish is applied to rt at once, so a new
// predicate starts degraded-first as the old one ran. rt may be nil (the
// reload removed the rt block): Observe then keeps the current quality.
func (d *Degrader) Retarget(rt *ResponseTime) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if rt == d.rt {
		return
	}
	d.rt = rt
	if rt != nil && d.cfg.Admission {
		if d.admit {
			rt.Enable()
		} else {
			rt.Disable()
		}
	}
	d.cfg.Logger.Info("degrader follows a new rt predicate", "target", targetOf(rt))
}

func targetOf(rt *ResponseTime) time.Duration {
	if rt == nil {
		return 0
	}
	return rt.Target()
}

// Update feeds a p90 response time (0: no measurement yet) and its target
// at time now. At most once per Interval it adjusts the quality and the
// admission wish, which it applies to the ResponseTime when configured
// to; it returns both.
func (d *Degrader) Update(now time.Time, p90, target time.Duration) (quality float64, admission bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pressure || d.rt != nil && d.rt.Pressure() {
		d.q = d.cfg.Min // short of memory: the least work per request
		return d.q, d.admit
	}
	if p90 <= 0 || target <= 0 || now.Sub(d.last) < d.cfg.Interval {
		return d.q, d.admit
	}
	d.last = now
	switch {
	case p90 > target:
		if d.q > d.cfg.Min {
			d.q = max(d.cfg.Min, d.q/d.cfg.Decrease)
		} else if d.cfg.Admission {
			d.admit = true
		}
	case d.admit:
		if p90 < target/2 {
			d.admit = false
		}
	default:
		d.q = min(1, d.q+d.cfg.Increase)
	}
	d.applyLocked(p90)
	return d.q, d.admit
}

// applyLocked switches the ResponseTime's admission control to the
// controller's wish (an atomic store in rt: no lock is taken).
func (d *Degrader) applyLocked(p90 time.Duration) {
	if d.rt == nil || !d.cfg.Admission || d.admit == d.rt.Enabled() {
		return
	}
	if d.admit {
		d.rt.Enable()
		d.cfg.Logger.Info("lowest quality still too slow: admission control on", "p90", p90)
	} else {
		d.rt.Disable()
		d.cfg.Logger.Info("response time recovered: admission control off", "p90", p90)
	}
}

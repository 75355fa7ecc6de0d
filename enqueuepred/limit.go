package enqueuepred

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// LimitConfig configures an adaptive concurrency limit. Zero fields take
// the defaults.
type LimitConfig struct {
	// Algorithm selects how the limit moves, as the YAML types of the
	// same names do:
	//
	// "vegas" (the default; TCP Vegas, as in Netflix's concurrency-limits
	// VegasLimit) estimates the events queued in the stage from the
	// response time and the no-load response time: queue = limit × (1 −
	// noLoad/rt), and keeps that queue between alpha = 3·log10(limit) and
	// beta = 6·log10(limit) events (at least 3 and 6): the workers stay
	// busy and the queueing delay stays a few service times. Unlike a
	// client of a remote service, a stage knows its no-load response
	// time: it is the service time the runtime reports with each
	// completion, so rt and noLoad are averages of the completions'
	// response and service times (no probing for a minimum, which under a
	// standing queue ratchets the limit up, nor a minimum that a
	// heavy-tailed service makes far too low).
	//
	// "gradient" (Netflix's Gradient2Limit) compares the average response
	// time over a short window with the no-load time (here the average
	// service time, for the same reasons as vegas): limit = limit ×
	// max(0.5, min(1, tolerance × noLoad/rt)) + sqrt(limit), smoothed. It
	// holds the response time near tolerance × the service time, with a
	// queue of about sqrt(limit).
	Algorithm string
	Initial   int // initial limit; default 20
	Min       int // default 1
	Max       int // default 1000
	// "gradient" only.
	Tolerance float64       // response-time growth tolerated; default 1.5
	Smoothing float64       // weight of a new limit; default 0.2
	Window    time.Duration // shortest averaging window; default 100ms (and at least 10 completions)
	Now       func() time.Time
}

// Limit is an adaptive concurrency limit (beside the rate-based rt
// controller): at most Limit() events admitted and not yet handled
// (queued or in service, like a counter), the limit moved by each completion's
// response time (queued + service, from sink.Done) by the Vegas or the
// Gradient rule. It needs no target: it finds the concurrency at which
// the stage's response time starts to grow and stays there.
type Limit struct {
	counts
	cfg      LimitConfig
	inflight atomic.Int64
	limit    atomic.Int64
	clock    monoClock

	mu  sync.Mutex
	est float64 // the limit as a float (updates are fractional)
	svc float64 // average service time (s)
	rt  float64 // average response time (s)
	// Gradient's window.
	winStart int64
	winRT    float64
	winSvc   float64
	winN     int
	winPeak  int64 // most events in flight seen in the window
	short    float64
}

var (
	_ sink.Completer = (*Limit)(nil)
	_ sink.Canceler  = (*Limit)(nil)
	_ charger        = (*Limit)(nil)
	_ Inspector      = (*Limit)(nil)
)

// NewLimit returns an adaptive concurrency limit.
func NewLimit(cfg LimitConfig) (*Limit, error) {
	switch cfg.Algorithm {
	case "":
		cfg.Algorithm = "vegas"
	case "vegas", "gradient":
	default:
		return nil, fmt.Errorf("%w: unknown limit algorithm %q (known: vegas, gradient)", ErrBadConfig, cfg.Algorithm)
	}
	if cfg.Initial < 0 || cfg.Min < 0 || cfg.Max < 0 || cfg.Tolerance < 0 || cfg.Smoothing < 0 || cfg.Window < 0 {
		return nil, fmt.Errorf("%w: limit parameters must not be negative", ErrBadConfig)
	}
	if cfg.Min == 0 {
		cfg.Min = 1
	}
	if cfg.Max == 0 {
		cfg.Max = 1000
	}
	if cfg.Initial == 0 {
		cfg.Initial = min(max(20, cfg.Min), cfg.Max)
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = 1.5
	}
	if cfg.Smoothing == 0 {
		cfg.Smoothing = 0.2
	}
	if cfg.Window == 0 {
		cfg.Window = 100 * time.Millisecond
	}
	switch {
	case cfg.Max < cfg.Min:
		return nil, fmt.Errorf("%w: limit max %d below min %d", ErrBadConfig, cfg.Max, cfg.Min)
	case cfg.Initial < cfg.Min || cfg.Initial > cfg.Max:
		return nil, fmt.Errorf("%w: initial limit %d outside [%d, %d]", ErrBadConfig, cfg.Initial, cfg.Min, cfg.Max)
	case cfg.Tolerance < 1:
		return nil, fmt.Errorf("%w: tolerance must be >= 1, got %v", ErrBadConfig, cfg.Tolerance)
	case cfg.Smoothing > 1:
		return nil, fmt.Errorf("%w: smoothing must be in (0, 1], got %v", ErrBadConfig, cfg.Smoothing)
	}
	l := &Limit{cfg: cfg, clock: newMonoClock(cfg.Now), est: float64(cfg.Initial)}
	l.limit.Store(int64(cfg.Initial))
	return l, nil
}

// Name implements sink.Namer.
func (l *Limit) Name() string { return l.cfg.Algorithm }

// Accept implements sink.Predicate.
func (l *Limit) Accept(e sink.Event) bool {
	for {
		n := l.inflight.Load()
		if n >= l.limit.Load() {
			if sink.IsNonRejectable(e) {
				l.charge(e)
				return true
			}
			return l.no()
		}
		if l.inflight.CompareAndSwap(n, n+1) {
			return l.yes()
		}
	}
}

// charge implements charger.
func (l *Limit) charge(sink.Event) {
	l.inflight.Add(1)
	l.accepted.Add(1)
}

// Cancel implements sink.Canceler.
func (l *Limit) Cancel(sink.Event) { l.release() }

func (l *Limit) release() {
	for {
		n := l.inflight.Load()
		if n <= 0 || l.inflight.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// Done implements sink.Completer: the response time moves the limit.
func (l *Limit) Done(_ sink.Event, queued, service time.Duration) {
	inflight := l.inflight.Load()
	l.release()
	rt, svc := max(queued+service, 1).Seconds(), max(service, 1).Seconds()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.cfg.Algorithm {
	case "vegas":
		l.vegasLocked(rt, svc, inflight)
	case "gradient":
		l.gradientLocked(rt, svc, inflight)
	}
	l.limit.Store(int64(math.Round(l.est)))
}

func (l *Limit) clampLocked(v float64) float64 {
	return min(max(v, float64(l.cfg.Min)), float64(l.cfg.Max))
}

// vegasWeight is the weight of one completion in Vegas's averages.
const vegasWeight = 0.05

func (l *Limit) vegasLocked(rt, svc float64, inflight int64) {
	if l.rt == 0 {
		l.rt, l.svc = rt, svc
	} else {
		l.rt += (rt - l.rt) * vegasWeight
		l.svc += (svc - l.svc) * vegasWeight
	}
	limit := l.est
	q := math.Ceil(limit * max(0, 1-l.svc/l.rt))
	lg := max(1, math.Log10(limit))
	switch {
	case q <= lg:
		if float64(inflight)*2 < limit {
			return // application-limited: nothing learned about the limit
		}
		limit += 6 * lg
	case q < 3*lg:
		if float64(inflight)*2 < limit {
			return
		}
		limit += lg
	case q > 6*lg:
		limit -= lg
	default:
		return
	}
	l.est = l.clampLocked(limit)
}

func (l *Limit) gradientLocked(rt, svc float64, inflight int64) {
	now := l.clock.ns()
	if l.winN == 0 {
		l.winStart = now
	}
	l.winRT += rt
	l.winSvc += svc
	l.winN++
	l.winPeak = max(l.winPeak, inflight)
	if l.winN < 10 || now-l.winStart < int64(l.cfg.Window) {
		return
	}
	short, s := l.winRT/float64(l.winN), l.winSvc/float64(l.winN)
	l.winRT, l.winSvc, l.winN = 0, 0, 0
	l.short = short
	if l.svc == 0 {
		l.svc = s
	} else {
		l.svc += (s - l.svc) * 0.1
	}
	l.rt = short
	peak := l.winPeak
	l.winPeak = 0
	if float64(peak) < l.est/2 {
		return // application-limited all through the window
	}
	g := max(0.5, min(1, l.cfg.Tolerance*l.svc/short))
	next := l.est*g + math.Sqrt(l.est)
	l.est = l.clampLocked(l.est*(1-l.cfg.Smoothing) + next*l.cfg.Smoothing)
}

// Limit returns the current limit.
func (l *Limit) Limit() int { return int(l.limit.Load()) }

// InFlight returns the admitted events not yet handled.
func (l *Limit) InFlight() int { return int(l.inflight.Load()) }

// Inspect implements Inspector.
func (l *Limit) Inspect(report func(string, float64)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	report("limit", float64(l.limit.Load()))
	report("inflight", float64(l.inflight.Load()))
	report("rt", l.rt)
	report("service", l.svc)
	l.inspect(report)
}

package enqueuepred

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/clock"
)

// PacerConfig configures a Pacer.
type PacerConfig struct {
	Rate  float64 // events per second; required
	Depth int     // burst: events that may go at once after a quiet period; default 1
	Now   func() time.Time
}

// Pacer is JOBS's queueing rate regulator, beside Rate which rejects: it
// does not refuse events, it delays them so that they are dispatched at
// most Rate per second. A stage's `queue: {dispatch: R, burst: B}` makes
// the runtime Reserve one token per event and hand the handler batches of
// at most B events, each event released when its token is there, on the
// manager's clock (a handler can also call Wait itself, see the example);
// the events wait in the
// stage's queue, whose threshold (or another predicate) bounds how many may
// wait. The waiting goroutines are the stage's own workers, so the queue
// drains at the rate whatever the pool size.
type Pacer struct {
	clock monoClock

	mu       sync.Mutex
	interval float64 // ns per event
	depth    float64
	tat      float64 // ns: when the paced flow has caught up (GCRA)
	waited   time.Duration
	paced    uint64
}

// NewPacer returns a pacer.
func NewPacer(cfg PacerConfig) (*Pacer, error) {
	if !(cfg.Rate > 0) || math.IsInf(cfg.Rate, 0) {
		return nil, fmt.Errorf("%w: pacer rate must be positive and finite, got %v", ErrBadConfig, cfg.Rate)
	}
	if cfg.Depth < 0 {
		return nil, fmt.Errorf("%w: pacer depth must not be negative, got %d", ErrBadConfig, cfg.Depth)
	}
	p := &Pacer{clock: newMonoClock(cfg.Now), depth: float64(max(cfg.Depth, 1))}
	p.interval = 1e9 / cfg.Rate
	return p, nil
}

// Reserve books n events and returns how long the caller must wait before
// dispatching them (0: at once).
func (p *Pacer) Reserve(n int) time.Duration {
	now := float64(p.clock.ns())
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tat = max(p.tat, now) + float64(n)*p.interval
	wait := time.Duration(max(0, p.tat-now-p.depth*p.interval))
	p.waited += wait
	p.paced += uint64(n)
	return wait
}

// Wait reserves n events and sleeps until they may be dispatched, or until
// ctx ends (then it returns ctx's error and the reservation stands).
func (p *Pacer) Wait(ctx context.Context, n int) error {
	d := p.Reserve(n)
	if d <= 0 || clock.Sleep(ctx, d) {
		return nil
	}
	return ctx.Err()
}

// SetRate changes the rate (ignored unless positive and finite).
func (p *Pacer) SetRate(r float64) {
	if !(r > 0) || math.IsInf(r, 0) {
		return
	}
	p.mu.Lock()
	p.interval = 1e9 / r
	p.mu.Unlock()
}

// Rate returns the rate.
func (p *Pacer) Rate() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return 1e9 / p.interval
}

// Inspect implements Inspector.
func (p *Pacer) Inspect(report func(string, float64)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	report("rate", 1e9/p.interval)
	report("paced", float64(p.paced))
	report("waited_s", p.waited.Seconds())
}

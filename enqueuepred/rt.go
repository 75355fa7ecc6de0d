package enqueuepred

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// rtMode is RTConfig.Mode parsed.
type rtMode int

const (
	modeFast rtMode = iota
	modeThesis
)

func (m rtMode) String() string {
	switch m {
	case modeFast:
		return "fast"
	case modeThesis:
		return "thesis"
	}
	return fmt.Sprintf("rtMode(%d)", int(m))
}

// parseMode parses "fast" (or "") and "thesis".
func parseMode(s string) (rtMode, error) {
	switch s {
	case "", "fast":
		return modeFast, nil
	case "thesis":
		return modeThesis, nil
	}
	return 0, fmt.Errorf("unknown mode %q (known: fast, thesis)", s)
}

// ErrBadConfig is wrapped by constructor errors for invalid configurations.
var ErrBadConfig = errors.New("enqueuepred: bad configuration")

// RTConfig configures a ResponseTime controller. Zero fields take the
// defaults of the selected Mode; the thesis defaults are those of Fig. 50.
type RTConfig struct {
	Target time.Duration // 90th-percentile response-time target; required
	// Mode selects the algorithm, as the YAML key `mode` does:
	//
	// "fast" (or "", the default) limits the wait of new arrivals instead
	// of their rate: an event is admitted while the events queued ahead
	// of it can be served within target − p90(service), at the stage's
	// measured capacity (completions per second while the queue stays
	// non-empty, so one worker or many, batched or not); a slow feedback
	// loop scales that wait budget so that the measured p90 sits at the
	// target. There is no starting rate: a stage admits everything while
	// its queue is empty. The stage's queue is read through sink.Binder
	// (without it, the events in service are estimated by Little's law).
	// NReq, Alpha, the AIMD knobs and Headroom do not apply; InitialRate,
	// if set, seeds the capacity estimate.
	//
	// "thesis" is the SEDA thesis §7.2.1 algorithm with the Fig. 50
	// parameters: additive increase, multiplicative decrease, run every
	// NReq completions or Timeout.
	Mode string

	NReq    int           // samples before the controller runs; thesis 100, fast 1024 (buffer size)
	Timeout time.Duration // thesis: run after this long even with fewer samples; default 1s
	// Interval is the fast mode's control period: default Target/4,
	// clamped to [5ms, 250ms].
	Interval time.Duration

	Alpha   float64 // EWMA weight of the old p90 estimate; thesis 0.7, fast 0.5
	ErrInc  float64 // error below which the rate increases; default -0.5
	ErrDec  float64 // error above which the rate decreases; default 0
	AdjInc  float64 // additive increase; default 2
	AdjDec  float64 // multiplicative decrease; default 1.2
	CInc    float64 // weight of the additive increase; default -0.1
	RateMin float64 // default 0.05
	RateMax float64 // thesis 5000, fast 1e7

	InitialRate float64 // thesis 10; fast: initial capacity estimate (default: measured)
	Depth       int     // bucket depth; thesis 10, fast: rate/100 (10 ms of tokens) and at least 10
	// Headroom is the fast mode's admission rate, as a multiple of the
	// measured throughput, while it is not rejecting anything; default 2.
	Headroom float64

	Disabled bool             // start with admission control disabled
	Now      func() time.Time // nil: time.Now
	Logger   *slog.Logger     // nil: discard
}

// maxNReq bounds the sample buffer.
const maxNReq = 1 << 16

// params is an RTConfig with defaults applied, in float seconds.
type params struct {
	mode                                        rtMode
	target                                      float64
	nreq                                        int
	timeout, interval                           int64 // ns
	alpha, errInc, errDec, adjInc, adjDec, cInc float64
	rateMin, rateMax, initRate, headroom        float64
	depth                                       int
}

func (c RTConfig) params() (params, error) {
	if c.Target <= 0 {
		return params{}, fmt.Errorf("%w: response-time target must be positive, got %v", ErrBadConfig, c.Target)
	}
	mode, err := parseMode(c.Mode)
	if err != nil {
		return params{}, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	p := params{
		mode:     mode,
		target:   c.Target.Seconds(),
		nreq:     c.NReq,
		timeout:  int64(c.Timeout),
		interval: int64(c.Interval),
		alpha:    c.Alpha,
		errInc:   c.ErrInc,
		errDec:   c.ErrDec,
		adjInc:   c.AdjInc,
		adjDec:   c.AdjDec,
		cInc:     c.CInc,
		rateMin:  c.RateMin,
		rateMax:  c.RateMax,
		initRate: c.InitialRate,
		headroom: c.Headroom,
		depth:    c.Depth,
	}
	thesis := mode == modeThesis
	def := func(v *float64, thesisV, fastV float64) {
		if *v == 0 {
			if thesis {
				*v = thesisV
			} else {
				*v = fastV
			}
		}
	}
	def(&p.alpha, 0.7, 0.5)
	def(&p.errInc, -0.5, -0.5)
	def(&p.adjInc, 2, 2)
	def(&p.adjDec, 1.2, 1.2)
	def(&p.cInc, -0.1, -0.1)
	def(&p.rateMin, 0.05, 0.05)
	def(&p.rateMax, 5000, 1e7)
	def(&p.initRate, 10, 10)
	def(&p.headroom, 2, 2)
	if p.nreq <= 0 {
		p.nreq = 100
		if !thesis {
			p.nreq = 1024
		}
	}
	if p.timeout <= 0 {
		p.timeout = int64(time.Second)
	}
	if p.interval <= 0 {
		p.interval = min(max(int64(c.Target/4), int64(5*time.Millisecond)), int64(250*time.Millisecond))
	}
	if p.depth <= 0 && thesis {
		p.depth = 10
	}
	switch {
	case p.alpha < 0 || p.alpha >= 1:
		return params{}, fmt.Errorf("%w: alpha must be in [0,1), got %v", ErrBadConfig, p.alpha)
	case p.adjDec <= 1:
		return params{}, fmt.Errorf("%w: adjDec must be > 1, got %v", ErrBadConfig, p.adjDec)
	case p.rateMin <= 0 || p.rateMax < p.rateMin:
		return params{}, fmt.Errorf("%w: need 0 < rateMin <= rateMax, got %v, %v", ErrBadConfig, p.rateMin, p.rateMax)
	case p.errInc > p.errDec:
		return params{}, fmt.Errorf("%w: errInc %v above errDec %v", ErrBadConfig, p.errInc, p.errDec)
	case p.nreq > maxNReq:
		return params{}, fmt.Errorf("%w: nreq must be at most %d, got %d", ErrBadConfig, maxNReq, p.nreq)
	case p.headroom < 1:
		return params{}, fmt.Errorf("%w: headroom must be >= 1, got %v", ErrBadConfig, p.headroom)
	}
	p.initRate = min(max(p.initRate, p.rateMin), p.rateMax)
	return p, nil
}

func (p *params) depthFor(rate float64) float64 {
	if p.depth > 0 {
		return float64(p.depth)
	}
	return max(10, math.Ceil(rate/100))
}

// ctl is the per-class state of a response-time controller. The atomics are
// touched by Accept; the fields after them are guarded by the owning
// controller's mutex.
type ctl struct {
	p *params
	b *bucket

	inSystem atomic.Int64  // admitted and not yet done
	rejected atomic.Uint64 // rejections by this class's bucket
	accepted atomic.Uint64

	samples     []int64 // response times (ns) since the last run
	completions int     // since the last run, including beyond the buffer
	lastRun     int64   // ns since origin
	cur         float64 // smoothed p90 (s)
	samp        float64 // last raw p90 (s)
	rate        float64
	xEst        float64 // smoothed throughput (events/s)
	rejAtRun    uint64
	lc          int  // multiclass: times over target with nobody lower to cut
	preempted   bool // multiclass: a higher class missed its target
}

func newCtl(p *params, now func() time.Time) *ctl {
	c := &ctl{p: p, rate: p.initRate, samples: make([]int64, 0, p.nreq)}
	c.b = newBucket(c.rate, p.depthFor(c.rate), now)
	return c
}

func (c *ctl) nowNS() int64 { return c.b.ticks() >> tickShift }

func (c *ctl) setRate(r float64) {
	c.rate = min(max(r, c.p.rateMin), c.p.rateMax)
	c.b.set(c.rate, c.p.depthFor(c.rate))
}

// add records a completion; it reports whether the controller is due.
func (c *ctl) add(now int64, rt time.Duration) bool {
	c.completions++
	if len(c.samples) < cap(c.samples) {
		c.samples = append(c.samples, int64(rt))
	}
	return c.due(now)
}

func (c *ctl) due(now int64) bool {
	if len(c.samples) >= c.p.nreq {
		return true
	}
	if c.p.mode == modeThesis {
		return len(c.samples) > 0 && now-c.lastRun >= c.p.timeout
	}
	return now-c.lastRun >= c.p.interval
}

// observation is what one controller run sees.
type observation struct {
	n       int     // samples
	err     float64 // (estimate - target) / target
	binding bool    // the bucket rejected something since the last run
	x       float64 // smoothed throughput
	est     float64 // response-time estimate used (s)
}

// observe closes the current measurement period and updates the estimates.
func (c *ctl) observe(now int64) observation {
	p := c.p
	o := observation{n: len(c.samples)}
	if o.n > 0 {
		slices.Sort(c.samples)
		c.samp = float64(c.samples[int(0.9*float64(o.n))]) / 1e9
		c.cur = p.alpha*c.cur + (1-p.alpha)*c.samp
	}
	in := c.inSystem.Load()
	elapsed := float64(now-c.lastRun) / 1e9
	if elapsed > 0 && (c.completions > 0 || in > 0) {
		x := float64(c.completions) / elapsed
		if c.xEst == 0 {
			c.xEst = x
		} else {
			c.xEst = 0.5*c.xEst + 0.5*x
		}
	}
	o.x = c.xEst
	rej := c.rejected.Load()
	o.binding = rej != c.rejAtRun
	c.rejAtRun = rej
	o.est = c.cur
	if p.mode == modeFast {
		if in == 0 && o.n == 0 {
			o.est = 0 // idle: a new arrival waits for nothing
		}
		// While the bucket limits the flow, Little's law tells what a new
		// arrival can expect to spend in the stage, long before slow
		// completions are measured.
		if o.binding && in > 0 && c.xEst > 0 {
			o.est = max(o.est, float64(in)/c.xEst)
		}
	}
	o.err = (o.est - p.target) / p.target
	c.samples = c.samples[:0]
	c.completions = 0
	c.lastRun = now
	return o
}

// increaseThesis is Fig. 50's additive increase.
func (c *ctl) increaseThesis(err float64) {
	c.setRate(c.rate + c.p.adjInc*-(err-c.p.cInc))
}

// decreaseOwn cuts this class's rate after it missed its target.
func (c *ctl) decreaseOwn(o observation) {
	if c.p.mode == modeThesis {
		c.setRate(c.rate / c.p.adjDec)
		return
	}
	base := c.rate
	if o.x > 0 {
		base = o.x
	}
	c.setRate(base * max(0.5, 1/(1+o.err)))
}

// increaseFast raises the rate while under target in fast mode.
func (c *ctl) increaseFast(o observation) {
	p := c.p
	if !o.binding {
		// Not limiting anything: track the measured throughput with
		// headroom, so that a spike starts from the service rate.
		if o.err < p.cInc {
			c.setRate(max(p.headroom*o.x, p.initRate))
		}
		return
	}
	var r float64
	switch {
	case o.err < p.errInc:
		r = 2 * c.rate
	case o.err < p.cInc:
		r = c.rate * (1 + (-o.err + p.cInc))
	default:
		return
	}
	if o.x > 0 {
		r = min(r, max(c.rate, p.headroom*o.x))
	}
	c.setRate(max(r, c.rate))
}

func (c *ctl) inspect(report func(string, float64)) {
	report("rate", c.rate)
	report("tokens", finite(c.b.tokens()))
	report("p90", c.cur)
	report("p90_sample", c.samp)
	report("target", c.p.target)
	report("throughput", c.xEst)
	report("in_system", float64(c.inSystem.Load()))
	report("accepted", float64(c.accepted.Load()))
	report("rejected", float64(c.rejected.Load()))
}

func (c *ctl) admit(e sink.Event, enabled bool) bool {
	if !enabled || c.b.take(1) {
		c.inSystem.Add(1)
		c.accepted.Add(1)
		return true
	}
	if sink.IsNonRejectable(e) {
		c.b.force(1)
		c.inSystem.Add(1)
		c.accepted.Add(1)
		return true
	}
	c.rejected.Add(1)
	return false
}

func (c *ctl) release() {
	for {
		n := c.inSystem.Load()
		if n <= 0 || c.inSystem.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// ResponseTime is the per-stage 90th-percentile response-time controller of
// the SEDA thesis (chapter 7): it measures each event's response time (time
// queued plus service time, reported by the runtime through sink.Done) and
// adjusts the rate of a token bucket guarding the stage to keep the p90
// under a target. See RTConfig.Mode for the two algorithms.
//
// For service degradation (§7.2.2) the application reads P90 and switches
// admission control off and on with Disable and Enable; measurement goes on
// while disabled.
type ResponseTime struct {
	c       *ctl
	w       *waitModel // fast mode
	p       params
	enabled atomic.Bool
	next    atomic.Int64 // fast mode: ns since origin when the controller is due
	// pressure: the process is short of a resource (SetPressure, in
	// degrade.go); the stage's Degrader serves at its lowest quality.
	pressure atomic.Bool
	log      *slog.Logger

	mu sync.Mutex
}

var (
	_ sink.Completer = (*ResponseTime)(nil)
	_ sink.Canceler  = (*ResponseTime)(nil)
	_ charger        = (*ResponseTime)(nil)
	_ Inspector      = (*ResponseTime)(nil)
	_ sink.Binder    = (*ResponseTime)(nil)
)

// NewResponseTime returns a response-time controller.
func NewResponseTime(cfg RTConfig) (*ResponseTime, error) {
	p, err := cfg.params()
	if err != nil {
		return nil, err
	}
	r := &ResponseTime{p: p, log: cfg.Logger}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.c = newCtl(&r.p, cfg.Now)
	r.c.lastRun = r.c.nowNS()
	if p.mode == modeFast {
		r.w = newWaitModel(cfg.InitialRate)
		r.w.fbStart = r.c.lastRun
		r.c.setRate(math.Inf(1)) // the wait model decides, not the bucket
	}
	r.next.Store(r.c.lastRun + p.interval)
	r.enabled.Store(!cfg.Disabled)
	return r, nil
}

// Name implements sink.Namer.
func (r *ResponseTime) Name() string { return "rt" }

// Accept implements sink.Predicate.
func (r *ResponseTime) Accept(e sink.Event) bool {
	if r.p.mode == modeFast {
		if now := r.c.nowNS(); now >= r.next.Load() && r.mu.TryLock() {
			r.runLocked(now)
			r.mu.Unlock()
		}
		c := r.c
		if !r.enabled.Load() || r.w.allow(c.inSystem.Load()) || sink.IsNonRejectable(e) {
			c.inSystem.Add(1)
			c.accepted.Add(1)
			return true
		}
		c.rejected.Add(1)
		return false
	}
	return r.c.admit(e, r.enabled.Load())
}

// Bind implements sink.Binder: in fast mode the controller reads the length
// of the queue it guards.
func (r *ResponseTime) Bind(s sink.Sink) {
	if r.w != nil {
		r.w.bound.Bind(s)
	}
}

// charge implements charger.
func (r *ResponseTime) charge(sink.Event) {
	r.c.b.force(1)
	r.c.inSystem.Add(1)
	r.c.accepted.Add(1)
}

// Cancel implements sink.Canceler.
func (r *ResponseTime) Cancel(sink.Event) {
	r.c.b.refund(1)
	r.c.release()
}

// Done implements sink.Completer: queued+service is the response time.
func (r *ResponseTime) Done(_ sink.Event, queued, service time.Duration) {
	r.c.release()
	now := r.c.nowNS()
	r.mu.Lock()
	if r.w != nil {
		r.w.add(now, int64(queued), int64(service))
		if now >= r.next.Load() || (r.w.capacity == 0 && r.w.bound.len() > 0) {
			r.runLocked(now)
		}
	} else if r.c.add(now, queued+service) {
		r.runLocked(now)
	}
	r.mu.Unlock()
}

func (r *ResponseTime) runLocked(now int64) {
	c := r.c
	if r.w != nil {
		elapsed := now - c.lastRun
		c.lastRun = now
		r.next.Store(now + r.p.interval)
		r.w.run(&r.p, now, elapsed, c.inSystem.Load(), c.rejected.Load())
		c.cur = r.w.est
		c.xEst = r.w.thr
		return
	}
	if !c.due(now) {
		return
	}
	o := c.observe(now)
	r.next.Store(now + r.p.interval)
	old := c.rate
	if r.enabled.Load() || r.p.mode == modeFast {
		switch {
		case r.p.mode == modeThesis && o.err < r.p.errInc:
			c.increaseThesis(o.err)
		case o.err > r.p.errDec:
			c.decreaseOwn(o)
		case r.p.mode == modeFast:
			c.increaseFast(o)
		}
	}
	if c.rate != old {
		r.log.Debug("rt controller", "p90", c.cur, "estimate", o.est, "err", o.err, "throughput", o.x, "rate", c.rate)
	}
}

// P90 returns the current (smoothed) 90th-percentile response time.
func (r *ResponseTime) P90() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Duration(r.c.cur * 1e9)
}

// Rate returns the token bucket's current rate; in fast mode, the
// estimated capacity of the stage (events/s), which is the rate it admits
// while overloaded.
func (r *ResponseTime) Rate() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != nil {
		return r.w.capacity
	}
	return r.c.rate
}

// SetRate overrides the current admission rate (in fast mode, the capacity
// estimate); the controller goes on adjusting from there.
func (r *ResponseTime) SetRate(rate float64) {
	r.mu.Lock()
	if r.w != nil {
		r.w.capacity = max(rate, 0)
	} else {
		r.c.setRate(rate)
	}
	r.mu.Unlock()
}

// Target returns the response-time target.
func (r *ResponseTime) Target() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Duration(r.p.target * 1e9)
}

// SetTarget changes the target while traffic flows (ignored if d <= 0).
func (r *ResponseTime) SetTarget(d time.Duration) {
	if d <= 0 {
		return
	}
	r.mu.Lock()
	r.p.target = d.Seconds()
	r.mu.Unlock()
}

// Mode returns the algorithm in use: "fast" or "thesis".
func (r *ResponseTime) Mode() string { return r.p.mode.String() }

// Enable turns admission control on.
func (r *ResponseTime) Enable() { r.enabled.Store(true) }

// Disable turns admission control off: every event is admitted, response
// times are still measured.
func (r *ResponseTime) Disable() { r.enabled.Store(false) }

// Enabled reports whether admission control is on.
func (r *ResponseTime) Enabled() bool { return r.enabled.Load() }

// Inspect implements Inspector.
func (r *ResponseTime) Inspect(report func(string, float64)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	en := 0.0
	if r.enabled.Load() {
		en = 1
	}
	report("enabled", en)
	if r.w != nil {
		r.c.inspect(func(name string, v float64) {
			switch name {
			case "rate":
				v = r.w.capacity
			case "tokens", "throughput":
				return
			}
			report(name, v)
		})
		r.w.inspect(r.c.inSystem.Load(), report)
		return
	}
	r.c.inspect(report)
}

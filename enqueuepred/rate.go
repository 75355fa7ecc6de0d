package enqueuepred

import (
	"math"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// RateConfig configures a token-bucket rate limiter. The zero value is an
// unlimited bucket.
type RateConfig struct {
	Rate  float64          // tokens per second; 0 or +Inf: unlimited
	Depth int              // burst size in tokens; 0: Rate/100 (10 ms of tokens), at least 1
	Now   func() time.Time // nil: time.Now
	// Shards > 1 spreads the bucket over that many shards (at most the
	// depth), each with its share of rate and depth, for producers on
	// many cores: decisions stop fighting over one word, at the price of
	// exactness (see shardedBucket). 0 or 1: one exact bucket.
	Shards int
}

func (c RateConfig) depth() float64 {
	if c.Depth > 0 {
		return float64(c.Depth)
	}
	if c.Rate <= 0 || math.IsInf(c.Rate, 1) {
		return 1
	}
	return max(1, math.Ceil(c.Rate/100))
}

func (c RateConfig) rate() float64 {
	if c.Rate <= 0 {
		return math.Inf(1)
	}
	return c.Rate
}

// Rate admits events at most at a given rate with a given burst depth (a
// token bucket). Unlike Sandstorm's, any rate works: tokens regenerate
// continuously, not on a 1 ms tick. A decision costs one monotonic clock
// read and one compare-and-swap, allocation free. Rejections are counted;
// to keep the shared hot path to a single contended word, admissions are
// not (the queue's Stats count them).
type Rate struct {
	rejected stripedCounter
	b        *bucket        // one exact bucket, or
	sh       *shardedBucket // shards (RateConfig.Shards)

	mu      sync.Mutex // serializes setters
	nominal float64
	dep     float64
	scale   float64
}

var (
	_ sink.Canceler = (*Rate)(nil)
	_ scalable      = (*Rate)(nil)
	_ charger       = (*Rate)(nil)
)

// NewRate returns a token bucket that starts full.
func NewRate(c RateConfig) *Rate {
	r := &Rate{nominal: c.rate(), dep: c.depth(), scale: 1}
	if n := min(c.Shards, int(r.dep)); n > 1 && !math.IsInf(r.nominal, 1) {
		r.sh = newShardedBucket(n, r.nominal, r.dep, c.Now)
	} else {
		r.b = newBucket(r.nominal, r.dep, c.Now)
	}
	return r
}

// Shards returns the number of shards the bucket is spread over (1: one
// exact bucket).
func (r *Rate) Shards() int {
	if r.sh != nil {
		return len(r.sh.shards)
	}
	return 1
}

func (r *Rate) take(k int64) bool {
	if r.sh != nil {
		return r.sh.take(k)
	}
	return r.b.take(k)
}

func (r *Rate) force(k int64) {
	if r.sh != nil {
		r.sh.force(k)
		return
	}
	r.b.force(k)
}

func (r *Rate) bucketRate() float64 {
	if r.sh != nil {
		return r.sh.rate()
	}
	return r.b.rate()
}

func (r *Rate) bucketDepth() float64 {
	if r.sh != nil {
		return r.sh.depth()
	}
	return r.b.depth()
}

// Name implements sink.Namer.
func (r *Rate) Name() string { return "rate" }

// Accept implements sink.Predicate.
func (r *Rate) Accept(e sink.Event) bool {
	if r.take(1) {
		return true // admissions are not counted here: the queue counts them
	}
	if sink.IsNonRejectable(e) {
		r.charge(e)
		return true
	}
	r.rejected.add(1)
	return false
}

// charge implements charger: it takes a token even if that means debt.
func (r *Rate) charge(sink.Event) { r.force(1) }

// Cancel implements sink.Canceler: the token goes back.
func (r *Rate) Cancel(sink.Event) {
	if r.sh != nil {
		r.sh.refund(1)
		return
	}
	r.b.refund(1)
}

// SetRate changes the nominal rate while traffic flows (<= 0: unlimited).
func (r *Rate) SetRate(rate float64) {
	r.mu.Lock()
	r.nominal = RateConfig{Rate: rate}.rate()
	r.applyLocked()
	r.mu.Unlock()
}

// SetDepth changes the burst depth (<= 0: default).
func (r *Rate) SetDepth(depth int) {
	r.mu.Lock()
	r.dep = RateConfig{Rate: r.nominal, Depth: depth}.depth()
	r.applyLocked()
	r.mu.Unlock()
}

// Scale implements scalable.
func (r *Rate) Scale(f float64) {
	r.mu.Lock()
	r.scale = clamp01(f)
	r.applyLocked()
	r.mu.Unlock()
}

func (r *Rate) applyLocked() {
	rate := r.nominal * r.scale
	if math.IsInf(r.nominal, 1) && r.scale < 1 {
		rate = math.Inf(1) // an unlimited rate has nothing to scale
	}
	if r.sh != nil {
		r.sh.set(rate, r.dep)
		return
	}
	r.b.set(rate, r.dep)
}

// Rate returns the nominal rate (+Inf: unlimited).
func (r *Rate) Rate() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nominal
}

// EffectiveRate returns the rate in force (nominal scaled by modifiers).
func (r *Rate) EffectiveRate() float64 { return r.bucketRate() }

// Rejected returns how many events the bucket refused.
func (r *Rate) Rejected() uint64 { return r.rejected.load() }

// Tokens returns the tokens available now.
func (r *Rate) Tokens() float64 {
	if r.sh != nil {
		return r.sh.tokens()
	}
	return r.b.tokens()
}

// Inspect implements Inspector.
func (r *Rate) Inspect(report func(string, float64)) {
	report("rate", finite(r.bucketRate()))
	report("depth", r.bucketDepth())
	report("tokens", finite(r.Tokens()))
	report("rejected", float64(r.rejected.load()))
}

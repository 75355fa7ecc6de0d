package enqueuepred

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// tickShift sets the bucket's time resolution: 1 tick = 1/16 ns, so rates up
// to 16e9/s are representable and the rounding error of a rate is below one
// part in 10^4 up to 1e6/s. int64 ticks last 18 years from the bucket's
// creation.
const tickShift = 4

// bucket is a lock-free token bucket implemented as a generic cell rate
// algorithm: instead of a token count it keeps the theoretical arrival time
// (tat) of the next conforming event. Holding d tokens at time t is
// tat <= t - (d-1)*interval. One compare-and-swap per decision.
type bucket struct {
	_      [64]byte // keep tat on its own cache line
	tat    atomic.Int64
	_      [56]byte
	params atomic.Pointer[bucketParams]
	clock  monoClock
}

type bucketParams struct {
	rate     float64 // tokens per second as configured (after scaling)
	depth    float64
	interval int64 // ticks per token; 0 with open: unlimited
	tau      int64 // (depth-1) * interval: how far tat may run ahead of now
	open     bool  // unlimited rate: accept everything
	closed   bool  // zero rate: reject everything
}

func newBucket(rate, depth float64, now func() time.Time) *bucket {
	b := &bucket{clock: newMonoClock(now)}
	b.set(rate, depth)
	return b
}

// set installs a new rate and depth. The bucket keeps the number of tokens
// it lacks (or owes): the theoretical arrival time is rescaled from the old
// emission interval to the new one, so a bucket that was drained at a very
// low rate refills at once at the speed of a new, higher rate.
func (b *bucket) set(rate, depth float64) {
	p := newBucketParams(rate, depth)
	old := b.params.Load()
	if old != nil {
		now := b.ticks()
		tat := b.tat.Load()
		switch {
		case old.open || old.closed || p.open || p.closed:
			b.tat.CompareAndSwap(tat, now) // full
		case tat > now:
			missing := float64(tat-now) / float64(old.interval)
			limit := float64(p.tau+p.interval) * 2 // at most one bucket of debt
			b.tat.CompareAndSwap(tat, now+int64(min(missing*float64(p.interval), limit)))
		}
	}
	b.params.Store(p)
}

func newBucketParams(rate, depth float64) *bucketParams {
	p := &bucketParams{rate: rate, depth: depth}
	if depth < 1 {
		depth = 1
	}
	switch {
	case math.IsNaN(rate) || rate <= 0:
		p.closed = true
	case math.IsInf(rate, 1) || rate >= float64(time.Second<<tickShift):
		p.open = true
	default:
		p.interval = int64(float64(time.Second<<tickShift)/rate + 0.5)
		if p.interval < 1 {
			p.interval = 1
		}
		tau := (depth - 1) * float64(p.interval)
		if tau > float64(math.MaxInt64/4) {
			tau = float64(math.MaxInt64 / 4)
		}
		p.tau = int64(tau)
	}
	return p
}

func (b *bucket) ticks() int64 {
	return b.clock.ns() << tickShift
}

// take removes n tokens if the bucket holds them.
func (b *bucket) take(n int64) bool {
	p := b.params.Load()
	if p.open {
		return true
	}
	if p.closed {
		return false
	}
	return b.takeAt(p, b.ticks(), n)
}

// takeAt is take at a given time (ticks since origin).
func (b *bucket) takeAt(p *bucketParams, now, n int64) bool {
	if p.open {
		return true
	}
	if p.closed {
		return false
	}
	limit := now + p.tau + p.interval
	for {
		tat := b.tat.Load()
		next := max(tat, now) + n*p.interval
		if next > limit {
			return false
		}
		if b.tat.CompareAndSwap(tat, next) {
			return true
		}
	}
}

// force removes n tokens unconditionally, going into debt if needed.
func (b *bucket) force(n int64) {
	p := b.params.Load()
	if p.open || p.closed {
		return
	}
	now := b.ticks()
	for {
		tat := b.tat.Load()
		if b.tat.CompareAndSwap(tat, max(tat, now)+n*p.interval) {
			return
		}
	}
}

// refund gives n tokens back (an admitted event was not kept).
func (b *bucket) refund(n int64) {
	p := b.params.Load()
	if p.open || p.closed {
		return
	}
	b.tat.Add(-n * p.interval)
}

// tokens returns the tokens available now (negative: debt).
func (b *bucket) tokens() float64 {
	p := b.params.Load()
	if p.open {
		return math.Inf(1)
	}
	if p.closed {
		return 0
	}
	now := b.ticks()
	tat := b.tat.Load()
	d := max(p.depth, 1)
	if tat <= now {
		return d
	}
	return d - float64(tat-now)/float64(p.interval)
}

func (b *bucket) rate() float64  { return b.params.Load().rate }
func (b *bucket) depth() float64 { return b.params.Load().depth }

// shardedBucket spreads a token bucket over shards, each with its share of
// the rate and the depth and its own cache line, so that producers on
// different cores mostly take tokens from different words (RateConfig
// Shards). A decision starts at a random shard and, if that one is empty,
// looks at the others, so one producer can still use every token. Totals
// (rate, depth, tokens) are those of the whole; what is lost against one
// exact bucket is that tokens are spread: a burst is admitted in full only
// if the shards are full, and a debt (force) sits in one shard.
type shardedBucket struct {
	shards []*bucket
}

func newShardedBucket(n int, rate, depth float64, now func() time.Time) *shardedBucket {
	s := &shardedBucket{shards: make([]*bucket, n)}
	for i := range s.shards {
		s.shards[i] = newBucket(rate/float64(n), depth/float64(n), now)
		s.shards[i].clock = s.shards[0].clock // one time base
	}
	return s
}

func (s *shardedBucket) set(rate, depth float64) {
	n := float64(len(s.shards))
	for _, b := range s.shards {
		b.set(rate/n, depth/n)
	}
}

// take removes k tokens: one shard's if it holds them, otherwise one at a
// time from any (given back if the whole holds fewer than k).
func (s *shardedBucket) take(k int64) bool {
	n := len(s.shards)
	start := int(rand.Uint32() % uint32(n))
	now := s.shards[0].ticks()
	for i := 0; i < n; i++ {
		b := s.shards[(start+i)%n]
		if b.takeAt(b.params.Load(), now, k) {
			return true
		}
	}
	if k == 1 {
		return false
	}
	var taken []int
	for t := int64(0); t < k; t++ {
		got := -1
		for i := 0; i < n && got < 0; i++ {
			j := (start + i) % n
			if b := s.shards[j]; b.takeAt(b.params.Load(), now, 1) {
				got = j
			}
		}
		if got < 0 {
			for _, j := range taken {
				s.shards[j].refund(1)
			}
			return false
		}
		taken = append(taken, got)
	}
	return true
}

func (s *shardedBucket) pick() *bucket { return s.shards[rand.Uint32()%uint32(len(s.shards))] }

func (s *shardedBucket) force(k int64)  { s.pick().force(k) }
func (s *shardedBucket) refund(k int64) { s.pick().refund(k) }

func (s *shardedBucket) tokens() float64 {
	t := 0.0
	for _, b := range s.shards {
		t += b.tokens()
	}
	return t
}

func (s *shardedBucket) rate() float64 {
	r := 0.0
	for _, b := range s.shards {
		r += b.rate()
	}
	return r
}

func (s *shardedBucket) depth() float64 {
	d := 0.0
	for _, b := range s.shards {
		d += b.depth()
	}
	return d
}

package remote

import (
	"sync"
	"sync/atomic"
	"time"
)

// dedupLimit bounds the idempotency keys a replica remembers per
// generation (two generations are kept). At 10k requests a second over
// the default 2m window, the keys would otherwise number 1.2M per
// generation; 64Ki of them span 6.5s at that rate, more than the
// default request timeout (2s) within which a sender retransmits.
const dedupLimit = 1 << 16

// dedup remembers the verdicts of recent requests by idempotency key, in
// two generations: a key is remembered for at least one window, or until
// limit newer keys came if that is sooner (the memory stays bounded: at
// most 2 × limit keys), and at most two windows.
type dedup struct {
	mu        sync.Mutex
	window    time.Duration
	limit     int
	now       func() time.Time
	cur, prev map[string]*decided
	rotated   time.Time

	// early counts the generations retired before their window because
	// they held limit keys: a retransmission older than the newest limit
	// keys is then decided again (its event may be admitted twice).
	early   atomic.Uint64
	onEarly func() // if set, called (outside d.mu) after each early retirement
}

// decided is a request's verdict, ready once done is closed; done is
// dropped (nil, under dedup.mu) once v is set, so that the verdicts kept
// for the window hold no channel.
type decided struct {
	v    *verdict
	done chan struct{}
}

func newDedup(window time.Duration, limit int, now func() time.Time) *dedup {
	return &dedup{window: window, limit: limit, now: now,
		cur: map[string]*decided{}, prev: map[string]*decided{}, rotated: now()}
}

// once returns the verdict of request id: decided by decide the first
// time, remembered afterwards. A copy of the request arriving while the
// first is being decided (on another subscription) waits for its verdict.
func (d *dedup) once(id string, decide func() *verdict) *verdict {
	d.mu.Lock()
	x, ok := d.cur[id]
	if !ok {
		x, ok = d.prev[id]
	}
	early := false
	if !ok {
		early = d.rotate()
		x = &decided{done: make(chan struct{})}
		d.cur[id] = x
	}
	done := x.done
	d.mu.Unlock()
	if early && d.onEarly != nil {
		d.onEarly()
	}
	switch {
	case !ok:
		v := decide()
		d.mu.Lock()
		x.v, x.done = v, nil
		d.mu.Unlock()
		close(done)
	case done != nil:
		<-done // a copy arrived while the first was being decided
	}
	c := *x.v
	return &c
}

// rotate starts a new generation, under d.mu, when the current one is a
// window old or holds limit keys; it reports a rotation before the
// window (counted in d.early).
func (d *dedup) rotate() (early bool) {
	now := d.now()
	full := len(d.cur) >= d.limit
	young := now.Sub(d.rotated) <= d.window
	if !full && young {
		return false
	}
	if full && young {
		d.early.Add(1)
	}
	d.prev, d.cur, d.rotated = d.cur, make(map[string]*decided, min(len(d.cur), d.limit)), now
	return full && young
}

// size returns how many keys d remembers.
func (d *dedup) size() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.cur) + len(d.prev)
}

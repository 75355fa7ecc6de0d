package remote

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// randomSender is a batchSender answering after a random short delay,
// refusing the callers whose first encoded byte is odd, with a request
// limit that changes between requests (reconnects to servers with other
// maximum payloads). It counts the requests in flight at once and checks
// none exceeds the largest limit it reported (unless it is one caller:
// another leader may have changed the limit since this one read it).
type randomSender struct {
	t        *testing.T
	limit    atomic.Int64
	largest  atomic.Int64
	inFlight atomic.Int64
	most     atomic.Int64
}

func (f *randomSender) sendEach(_ *combiner, batch []*pending) {
	n := f.inFlight.Add(1)
	for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
	}
	size := 0
	for _, p := range batch {
		size += len(p.enc)
	}
	if limit := int(f.largest.Load()); len(batch) > 1 && size > limit {
		f.t.Errorf("a request of %d callers carried %d bytes, over the limit %d", len(batch), size, limit)
	}
	time.Sleep(time.Duration(rand.IntN(50)) * time.Microsecond)
	for _, p := range batch {
		p.err = nil
		if p.enc[0]%2 == 1 {
			p.err = errOdd
		}
	}
	f.inFlight.Add(-1)
}

func (f *randomSender) combinedLimit() int {
	if rand.IntN(8) == 0 {
		f.limit.Store(int64(4096 + rand.IntN(1<<19)))
	}
	limit := f.limit.Load()
	for l := f.largest.Load(); limit > l && !f.largest.CompareAndSwap(l, limit); l = f.largest.Load() {
	}
	return int(limit)
}

// TestCombinerStress: from 3 to 1,100 goroutines enqueue in a loop,
// events of random sizes, against a sender with random delays and a
// changing limit: every caller gets its own verdict, no request goes
// over the limit, at most maxInFlight are in flight at once, and the
// combiner is left with nothing waiting, woken, leading or in flight.
func TestCombinerStress(t *testing.T) {
	for _, callers := range []int{3, 64, 300, 1100} {
		c := &combiner{}
		f := &randomSender{t: t}
		f.limit.Store(64 << 10)
		var wg sync.WaitGroup
		for g := range callers {
			wg.Go(func() {
				for i := range 20 {
					enc := make([]byte, 1+rand.IntN(3000))
					enc[0] = byte(g + i)
					p := &pending{wake: make(chan struct{}, 1), enc: enc}
					err := c.enqueue(f, p)
					if want := map[bool]error{false: nil, true: errOdd}[(g+i)%2 == 1]; err != want {
						t.Errorf("caller %d, call %d: verdict %v, want %v", g, i, err, want)
						return
					}
				}
			})
		}
		wg.Wait()
		if m := f.most.Load(); m > maxInFlight {
			t.Errorf("%d callers: %d requests in flight at once, over %d", callers, m, maxInFlight)
		}
		if c.waiting != 0 || len(c.rounds) != 0 || c.woken != 0 || c.leaders != 0 || c.inFlight != 0 {
			t.Fatalf("%d callers: left waiting %d in %d rounds (%d woken), %d leaders, %d in flight",
				callers, c.waiting, len(c.rounds), c.woken, c.leaders, c.inFlight)
		}
	}
}

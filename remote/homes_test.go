package remote

import (
	"sync"
	"testing"
	"time"
)

// TestForgottenHomeKeepsItsCombiner: a home whose replica is forgotten
// (out of rotation for forgetAfter) while maxInFlight requests to it
// wait for their verdicts keeps its combiner: the callers that come
// next for that home wait in its rounds instead of a new combiner
// sending beside the requests in flight, so no more than maxInFlight
// are ever in flight to the home, and every caller gets its verdict.
func TestForgottenHomeKeepsItsCombiner(t *testing.T) {
	s, clock, _ := watchedSender(t, StageConfig{})
	s.heard("ih", "wh")
	c := s.combinerFor("ih")
	f := &heldBatches{release: make(chan struct{})}
	// The first caller's request, then three full rounds sent beside it
	// (maxInFlight in all) and one caller waiting in a round not full.
	before, after := 1+3*maxCombined+1, maxCombined
	errs := make([]error, before+after)
	var wg sync.WaitGroup
	call := func(i int) {
		wg.Go(func() {
			p := &pending{wake: make(chan struct{}, 1), enc: []byte{byte(i % 2)}}
			errs[i] = s.combinerFor("ih").enqueue(f, p)
		})
	}
	waiting := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.waiting
	}
	call(0)
	waitUntil(t, "the first request held", func() bool { return f.holding() == 1 })
	for i := 1; i < before; i++ {
		call(i)
	}
	waitUntil(t, "maxInFlight requests held, one caller waiting", func() bool {
		return f.holding() == maxInFlight && waiting() == 1
	})

	sweepFor(s, clock, forgetAfter+time.Minute)
	s.mu.Lock()
	remembered := len(s.replicas)
	s.mu.Unlock()
	if remembered != 0 {
		t.Fatalf("%d replicas remembered after %v out of rotation, want 0", remembered, forgetAfter)
	}

	for i := before; i < before+after; i++ {
		call(i)
	}
	waitUntil(t, "the callers after the forget waiting, or a request more sent", func() bool {
		return waiting() == 1+after || f.holding() > maxInFlight
	})
	if held := f.holding(); held > maxInFlight {
		t.Fatalf("%d requests in flight to the forgotten home, want at most %d (a second combiner)", held, maxInFlight)
	}
	if s.combinerFor("ih") != c {
		t.Fatal("the forgotten home has a new combiner")
	}
	close(f.release)
	wg.Wait()
	for i, err := range errs {
		if want := map[bool]error{false: nil, true: errOdd}[i%2 == 1]; err != want {
			t.Fatalf("caller %d: verdict %v, want %v", i, err, want)
		}
	}
	if f.most > maxInFlight || f.events != before+after {
		t.Fatalf("at most %d requests held at once carrying %d callers, want at most %d and %d", f.most, f.events, maxInFlight, before+after)
	}
	if c.waiting != 0 || len(c.rounds) != 0 || c.woken != 0 || c.leaders != 0 || c.inFlight != 0 {
		t.Fatalf("left waiting %d in %d rounds (%d woken), %d leaders, %d in flight", c.waiting, len(c.rounds), c.woken, c.leaders, c.inFlight)
	}
}

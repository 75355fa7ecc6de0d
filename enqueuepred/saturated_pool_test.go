package enqueuepred_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/threadpool"
)

// poolClock is a threadpool.Clock whose ticks the test delivers.
type poolClock struct {
	mu    sync.Mutex
	now   time.Time
	ticks chan time.Time
}

func (c *poolClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *poolClock) NewTicker(time.Duration) (<-chan time.Time, func()) { return c.ticks, func() {} }

// tick advances the clock by d and hands the pool's controller one tick;
// it returns once the controller has taken it.
func (c *poolClock) tick(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	c.mu.Unlock()
	c.ticks <- now
}

// blockingStage is a threadpool.Stage whose handler waits for a token per
// event.
type blockingStage struct {
	q       *sink.Queue
	release chan struct{}
}

func (s *blockingStage) Name() string       { return "blocking" }
func (s *blockingStage) Queue() *sink.Queue { return s.q }
func (s *blockingStage) BatchSize() int     { return 1 }
func (s *blockingStage) RunBatch(es, _ []sink.Event, _ []int64) {
	for range es {
		<-s.release
	}
}

// waitFor polls cond; the deadline only guards against a hang (the
// controller's ticks decide, not the timing).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A real pool whose SEDA controller's growth check (thrashing detection)
// holds it at 3 of max 4 workers, on a fake clock: Saturated bound to it
// admits everything while the pool can grow, and lets its predicate decide
// once the pool stops at the lowered limit, although fewer events than
// threads (the pool's max) are in service, the case the old
// events-in-service rule never engaged in.
func TestSaturatedFollowsThrashLimit(t *testing.T) {
	st := &blockingStage{q: sink.NewQueue(0), release: make(chan struct{})}
	clock := &poolClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), ticks: make(chan time.Time)}
	p := threadpool.NewPool(st, threadpool.Config{Min: 1, Max: 4, Clock: clock,
		Controller: threadpool.ControllerConfig{Enabled: true, AutoMaxDetect: true, QueueThreshold: 10, Interval: time.Second}})
	sat := enqueuepred.NewSaturated(sink.PredicateFunc(func(sink.Event) bool { return false }), 4)
	sat.(interface{ BindPool(enqueuepred.PoolState) }).BindPool(p) // as package stage does
	st.q.SetPredicate(sat)
	p.Start(context.Background())
	defer func() {
		close(st.release)
		st.q.Close()
		if err := p.Wait(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	for i := range 100 {
		if err := st.q.Enqueue(i); err != nil {
			t.Fatalf("event %d refused while the pool can grow: %v", i, err)
		}
	}
	size := func(n int) func() bool { return func() bool { return p.Size() == n } }
	processed := func(n uint64) func() bool { return func() bool { return p.Processed() == n } }
	release := func(n int) {
		for range n {
			st.release <- struct{}{}
		}
	}

	clock.tick(time.Second) // baseline; backlogged: grow to 2
	waitFor(t, "2 workers", size(2))
	clock.tick(time.Second) // rate 0 at 2: grow to 3, judged nothing
	waitFor(t, "3 workers", size(3))
	release(10)
	waitFor(t, "10 processed", processed(10))
	clock.tick(time.Second) // 10/s at 3: grow to 4
	waitFor(t, "4 workers", size(4))
	if err := st.q.Enqueue("at max, busy"); err == nil {
		t.Fatal("admitted at max with every worker busy")
	}
	release(10)
	waitFor(t, "20 processed", processed(20))
	clock.tick(time.Second) // still 10/s at 4: the fourth worker adds nothing
	clock.tick(0)           // returns once the previous tick was applied
	if got := p.Limit(); got != 3 {
		t.Fatalf("pool limit %d after a growth that added nothing, want 3", got)
	}
	release(1) // a worker finishes and retires
	waitFor(t, "3 workers", size(3))
	if err := st.q.Enqueue("at the thrash limit"); err == nil {
		t.Fatalf("admitted at the thrash limit (size %d, limit %d) with every worker busy", p.Size(), p.Limit())
	}
}

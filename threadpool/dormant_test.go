package threadpool

import (
	"context"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// waitFor polls cond; the deadline only guards against a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A pool at its minimum size with nothing queued stops ticking; events
// queued while every worker is busy wake its controller, which grows the
// pool, and once the load is gone and the pool has shrunk back it goes
// dormant again.
func TestControllerRestsWhileQuiet(t *testing.T) {
	release := make(chan struct{})
	st := newTestStage(func([]sink.Event) { <-release })
	st.batch = 1
	p := NewPool(st, Config{
		Min: 1, Max: 3,
		Controller: ControllerConfig{Enabled: true, Interval: time.Millisecond, QueueThreshold: 2, Idle: 5 * time.Millisecond},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.Start(ctx)
	waitFor(t, "the idle pool's controller to rest", p.dormant.Load)

	for i := 0; i < 20; i++ {
		if err := st.q.Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the pool to grow to its maximum", func() bool { return p.Size() == 3 })
	if p.dormant.Load() {
		t.Fatal("the controller rests while the pool is above its minimum")
	}
	close(release)
	waitFor(t, "the queue to drain", func() bool { return st.q.Len() == 0 })
	waitFor(t, "the pool to shrink back", func() bool { return p.Size() == 1 })
	waitFor(t, "the controller to rest again", p.dormant.Load)
}

// Sizers other than the SEDA controller measure at every tick: they
// never rest.
func TestWhirlwindDoesNotRest(t *testing.T) {
	st := newTestStage(func([]sink.Event) {})
	p := NewPool(st, Config{
		Min: 1, Max: 3,
		Controller: ControllerConfig{Enabled: true, Type: TypeWhirlwind, Interval: time.Millisecond},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.Start(ctx)
	for i := 0; i < 20; i++ {
		before := p.lastTick.Load()
		waitFor(t, "a tick", func() bool { return p.lastTick.Load() != before })
	}
	if p.dormant.Load() {
		t.Fatal("a Whirlwind pool's controller rested")
	}
}

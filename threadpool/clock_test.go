package threadpool

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
	"github.com/sandstorm-go/sandstorm/sink"
)

// fakeClock is a Clock whose time and ticks the test drives.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	ticks chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), ticks: make(chan time.Time)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTicker(time.Duration) (<-chan time.Time, func()) { return c.ticks, func() {} }

// tick advances the clock by d and delivers one tick to the controller; it
// returns once the pool's control loop has taken the tick (and so has
// applied the one before).
func (c *fakeClock) tick(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	c.mu.Unlock()
	c.ticks <- now
}

// waitSize waits until p has want workers; the deadline only guards
// against a hang (the controller decides the size, not the timing).
func waitSize(t *testing.T, p *Pool, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.Size() != want {
		if time.Now().After(deadline) {
			t.Fatalf("pool size %d, want %d", p.Size(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPoolControllerOnFakeClock runs the thread-pool controller inside a
// real Pool (thesis Fig. 30): the pool grows by one worker per tick while
// the queue stays over its threshold, stops at Max, and retires workers
// once they have been idle for the idle time — all on the fake clock.
func TestPoolControllerOnFakeClock(t *testing.T) {
	release := make(chan struct{})
	st := newTestStage(func([]sink.Event) { <-release })
	st.batch = 1
	clock := newFakeClock()
	p := NewPool(st, Config{
		Min: 1, Max: 4, Clock: clock,
		Controller: ControllerConfig{Enabled: true, Interval: time.Second, QueueThreshold: 10, Idle: 5 * time.Second},
	})
	p.Start(context.Background())
	for i := 0; i < 100; i++ {
		if err := st.q.Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	waitSize(t, p, 1)
	for want := 2; want <= 4; want++ {
		clock.tick(time.Second)
		waitSize(t, p, want)
	}
	clock.tick(time.Second) // still backlogged, but at Max
	waitSize(t, p, 4)

	close(release) // the backlog drains and the workers go idle
	for st.q.Len() > 0 || sinkrt.Of(st.q).InService() > 0 {
		time.Sleep(time.Millisecond)
	}
	clock.tick(time.Second) // idle for less than 5 s: kept
	clock.tick(0)           // returns once the previous tick was applied
	if got := p.target.Load(); got != 4 {
		t.Fatalf("pool set to shrink to %d before the idle time", got)
	}
	// A worker may note its idleness only after the next tick: a few
	// ticks past the idle time retire every idle worker down to Min.
	for i := 0; i < 3; i++ {
		clock.tick(6 * time.Second)
	}
	waitSize(t, p, 1)
	if got := p.Processed(); got != 100 {
		t.Fatalf("processed %d, want 100", got)
	}
	st.q.Close()
	if err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSharedPoolWeights: with both stages backlogged, a stage of weight 3
// gets three batches for every one of a stage of weight 1 (smooth weighted
// round robin, one goroutine, so the order is exact).
func TestSharedPoolWeights(t *testing.T) {
	var mu sync.Mutex
	var order []string
	record := func(name string) func([]sink.Event) {
		return func([]sink.Event) {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
		}
	}
	light, heavy := newTestStage(record("light")), newTestStage(record("heavy"))
	light.batch, heavy.batch = 1, 1
	for i := 0; i < 400; i++ {
		_ = light.q.Enqueue(i)
		_ = heavy.q.Enqueue(i)
	}
	sp := NewSharedPool(SharedConfig{Threads: 1})
	rl, rh := sp.Add(light, 1, false), sp.Add(heavy, 3, false)
	sp.Start(context.Background())
	defer sp.Stop()
	light.q.Close()
	heavy.q.Close()
	for _, r := range []Runner{rl, rh} {
		if err := r.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// While both are busy (the first 400 batches: heavy's 400 events last
	// 400/3 rounds of four batches), heavy gets 3 of every 4.
	n := map[string]int{}
	for _, name := range order[:400] {
		n[name]++
	}
	if n["heavy"] != 300 || n["light"] != 100 {
		t.Fatalf("first 400 batches: %v, want heavy 300, light 100", n)
	}
	if len(order) != 800 {
		t.Fatalf("%d batches in all, want 800", len(order))
	}
}

// TestPoolGrowsByDefault: a pool configured with nothing but a max above
// its min runs its controller (no Enabled key needed) and grows while the
// queue stays backlogged; Disabled keeps it at its initial size.
func TestPoolGrowsByDefault(t *testing.T) {
	for _, tc := range []struct {
		name     string
		disabled bool
		want     int
	}{{"default", false, 3}, {"disabled", true, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			st := newTestStage(func([]sink.Event) { <-release })
			st.batch = 1
			clock := newFakeClock()
			p := NewPool(st, Config{Max: 3, Clock: clock, Controller: ControllerConfig{Disabled: tc.disabled}})
			if got := p.Config().Controller.Enabled; got == tc.disabled {
				t.Fatalf("Controller.Enabled = %v with Disabled %v", got, tc.disabled)
			}
			p.Start(context.Background())
			for i := 0; i < 1000; i++ {
				if err := st.q.Enqueue(i); err != nil {
					t.Fatal(err)
				}
			}
			if !tc.disabled {
				for range 3 {
					clock.tick(time.Second)
				}
				clock.tick(0) // returns once the previous tick was applied
			}
			waitSize(t, p, tc.want)
			close(release)
			st.q.Close()
			if err := p.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSlowStageGrowsToMax is a slow stage as a configuration file gives
// it: threadpool {min: 1, max: 4}, queue {threshold: 10}, the file's
// controller defaults (queueThreshold 100, thrashing detection) and the
// default batches of up to 1000. Its queue kept full, it grows to 4
// workers, one per tick (the effective queue threshold is 5, half the
// queue), and the events are spread over the workers: each takes its
// share of the queue, not all of it, so all four run batches at once. The
// handler blocks until the test releases it: the handler's slowness, with
// no sleep deciding anything.
func TestSlowStageGrowsToMax(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var batches []int
	inService := 0
	st := &testStage{q: sink.NewQueue(10), batch: 1000, run: func(es []sink.Event) {
		mu.Lock()
		batches = append(batches, len(es))
		inService++
		mu.Unlock()
		<-release
	}}
	clock := newFakeClock()
	p := NewPool(st, Config{Min: 1, Max: 4, Clock: clock,
		Controller: ControllerConfig{Enabled: true, AutoMaxDetect: true}})
	if got := p.Controller().Config().QueueThreshold; got != 5 {
		t.Fatalf("effective queue threshold %d, want 5 (half the queue's 10)", got)
	}
	busy := func(want int) { // every worker holds a batch
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			n := inService
			mu.Unlock()
			if n == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d batches in service, want %d", n, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	fill := func() { // producers keep the queue at its threshold
		for st.q.EnqueueLossy(0) {
		}
	}
	fill()
	p.Start(context.Background())
	busy(1)
	for want := 2; want <= 4; want++ {
		fill()
		clock.tick(time.Second)
		waitSize(t, p, want)
		busy(want)
	}
	fill()
	clock.tick(time.Second) // still backlogged, but at Max
	clock.tick(0)
	waitSize(t, p, 4)
	mu.Lock()
	for i, n := range batches {
		if n > 5 {
			t.Errorf("batch %d held %d events, want at most 5 (a share of the queue of 10)", i, n)
		}
	}
	mu.Unlock()
	close(release)
	st.q.Close()
	if err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

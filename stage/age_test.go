package stage_test

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestMaxTime: events queued before Start wait longer than a 1 ns age
// limit, so none is handled; each is counted, cancelled on the predicate
// that admitted it and logged. With a limit of an hour all are handled.
func TestMaxTime(t *testing.T) {
	for _, tc := range []struct {
		maxTime     time.Duration
		wantHandled int64
	}{{time.Nanosecond, 0}, {time.Hour, 100}, {0, 100}} {
		var logs bytes.Buffer
		m := stage.NewManager(stage.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		l := newLedger()
		var handled atomic.Int64
		h := stage.HandlerFunc(func(b []sink.Event) error { handled.Add(int64(len(b))); return nil })
		st, err := m.CreateStage("S", h, stage.StageConfig{Predicate: l, Queue: stage.QueueConfig{MaxTime: tc.maxTime},
			Batching: stage.BatchingConfig{Max: 8}})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			if err := st.Sink().Enqueue(i); err != nil {
				t.Fatal(err)
			}
		}
		started(t, m)
		shutdown(t, m)
		q := st
		if handled.Load() != tc.wantHandled || int64(q.Expired()) != 100-tc.wantHandled {
			t.Errorf("max_time %v: handled %d, expired %d; want %d handled", tc.maxTime, handled.Load(), q.Expired(), tc.wantHandled)
		}
		l.check(t)
		if warned := strings.Contains(logs.String(), "events expired in queue"); warned != (tc.wantHandled < 100) {
			t.Errorf("max_time %v: expiry logged %v:\n%s", tc.maxTime, warned, logs.String())
		}
	}
}

func TestMaxTimeConfig(t *testing.T) {
	_, err := stage.NewManager(stage.Options{}).CreateStage("S", stage.HandlerFunc(func([]sink.Event) error { return nil }),
		stage.StageConfig{Queue: stage.QueueConfig{MaxTime: -time.Second}})
	if !errors.Is(err, stage.ErrInvalidConfig) || !strings.Contains(err.Error(), "queue.max_time") {
		t.Fatalf("negative max_time: %v", err)
	}
	cfg, err := stage.ParseConfig([]byte("stages:\n  S:\n    handler: x\n    queue: {threshold: 10, max_time: 250ms}\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Stages[0].Config.Queue.MaxTime; got != 250*time.Millisecond {
		t.Fatalf("max_time %v", got)
	}
	_, err = stage.ParseConfig([]byte("stages:\n  S:\n    handler: x\n    queue: {max_time: -1s}\n"), "t.yaml")
	if err == nil || !strings.Contains(err.Error(), "line 4") || !strings.Contains(err.Error(), "max_time") {
		t.Fatalf("negative max_time in YAML: %v", err)
	}
}

// TestDispatchRate: with queue.dispatch every handled event goes through
// the stage's pacer (no timing is asserted: the rate is high enough never
// to wait).
func TestDispatchRate(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	var handled atomic.Int64
	h := stage.HandlerFunc(func(b []sink.Event) error { handled.Add(int64(len(b))); return nil })
	st, err := m.CreateStage("S", h, stage.StageConfig{Queue: stage.QueueConfig{Dispatch: 1e9, Burst: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if err := st.Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	started(t, m)
	shutdown(t, m)
	paced := -1.0
	st.Pacer().Inspect(func(name string, v float64) {
		if name == "paced" {
			paced = v
		}
	})
	if handled.Load() != 50 || paced != 50 {
		t.Fatalf("handled %d, paced %v; want 50 and 50", handled.Load(), paced)
	}
	other, err := stage.NewManager(stage.Options{}).CreateStage("T", h, stage.StageConfig{})
	if err != nil || other.Pacer() != nil {
		t.Fatalf("pacer without queue.dispatch (%v)", err)
	}
	for _, tc := range []struct {
		doc, want string
	}{
		{"queue: {dispatch: -1}", "queue.dispatch: dispatch rate must be in [0, 1e9]"},
		{"queue: {burst: 5}", "queue.burst: burst needs a dispatch rate"},
		{"queue: {dispatch: 10, burst: -2}", "queue.burst: negative burst"},
	} {
		_, err := stage.ParseConfig([]byte("stages:\n  S:\n    handler: x\n    "+tc.doc+"\n"), "t.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "line 4") {
			t.Errorf("%s: %v, want %q", tc.doc, err, tc.want)
		}
	}
}

// paceClock is a fake clock for the dispatch regulator: Now, and After
// timers the test fires by advancing the time to them.
type paceClock struct {
	mu     sync.Mutex
	now    time.Time
	timers chan paceTimer
}

type paceTimer struct {
	due time.Time
	c   chan time.Time
}

func (c *paceClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *paceClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.timers <- paceTimer{c.Now().Add(d), ch}
	return ch
}

// fire advances the clock to the timer's time and fires it.
func (c *paceClock) fire(t paceTimer) {
	c.mu.Lock()
	c.now = t.due
	c.mu.Unlock()
	t.c <- t.due
}

// TestDispatchTokenBucket: queue {dispatch: 200, burst: 10} is a token
// bucket. 300 queued events reach the handler in batches of at most 10:
// the burst at once, then one event per token, every 5 ms, so that at
// each step of the (fake) clock the handler has had 10 + 200·t events.
// One worker waits on the manager's timers (Options.After), so the test
// sees every wait.
func TestDispatchTokenBucket(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &paceClock{now: start, timers: make(chan paceTimer)}
	m := stage.NewManager(stage.Options{Now: clk.Now, After: clk.After})
	var mu sync.Mutex
	var batches []int
	handled := 0
	h := stage.HandlerFunc(func(b []sink.Event) error {
		mu.Lock()
		batches = append(batches, len(b))
		handled += len(b)
		mu.Unlock()
		return nil
	})
	st, err := m.CreateStage("S", h, stage.StageConfig{
		Queue:      stage.QueueConfig{Dispatch: 200, Burst: 10},
		ThreadPool: stage.ThreadPoolConfig{Min: 1, Max: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := range n {
		if err := st.Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	started(t, m)
	count := func() int { mu.Lock(); defer mu.Unlock(); return handled }
	for step := 0; step < n-10; step++ {
		var tm paceTimer
		select {
		case tm = <-clk.timers: // the worker waits: what it could hand out, it has
		case <-time.After(20 * time.Second):
			t.Fatalf("step %d: no wait for the rate (hang); %d handled", step, count())
		}
		el := clk.Now().Sub(start).Seconds()
		if want, got := 10+200*el, float64(count()); math.Abs(got-want) > 1 {
			t.Fatalf("at t=%v: %v events handled, want 10 + 200·t = %v", clk.Now().Sub(start), got, want)
		}
		if d := tm.due.Sub(clk.Now()); d != 5*time.Millisecond {
			t.Fatalf("step %d: waits %v for a token, want 5ms", step, d)
		}
		clk.fire(tm)
	}
	deadline := time.Now().Add(20 * time.Second)
	for count() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events handled", count(), n)
		}
		time.Sleep(time.Millisecond)
	}
	if el := clk.Now().Sub(start); el != 1450*time.Millisecond {
		t.Fatalf("last event at %v, want 1.45s ((300-10)/200 s)", el)
	}
	mu.Lock()
	for i, b := range batches {
		if b > 10 {
			t.Errorf("batch %d of %d events, want at most the burst, 10", i, b)
		}
	}
	mu.Unlock()
	shutdown(t, m)
}

// TestDispatchReappliesMaxTime: an event that waited for its token longer
// than queue.max_time is not handled. The manager's timer lets 300 ms of
// real time pass (at least) before the token, and max_time is 200 ms.
func TestDispatchReappliesMaxTime(t *testing.T) {
	slow := func(time.Duration) <-chan time.Time {
		c := make(chan time.Time, 1)
		go func() { time.Sleep(300 * time.Millisecond); c <- time.Now() }()
		return c
	}
	m := stage.NewManager(stage.Options{After: slow})
	var handled atomic.Int64
	var second atomic.Bool
	h := stage.HandlerFunc(func(b []sink.Event) error {
		handled.Add(int64(len(b)))
		for _, e := range b {
			second.Store(second.Load() || e == 1)
		}
		return nil
	})
	st, err := m.CreateStage("S", h, stage.StageConfig{
		Queue:      stage.QueueConfig{Dispatch: 1, Burst: 1, MaxTime: 200 * time.Millisecond},
		ThreadPool: stage.ThreadPoolConfig{Min: 1, Max: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	started(t, m)
	for i := range 2 {
		if err := st.Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for handled.Load()+int64(st.Expired()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("handled %d, expired %d", handled.Load(), st.Expired())
		}
		time.Sleep(time.Millisecond)
	}
	// The first event goes at once (had it waited 200 ms to be dequeued,
	// on a loaded machine, it would expire too); the second waits for
	// its token, 300 ms at least, and must expire.
	if second.Load() || st.Expired() < 1 {
		t.Fatalf("handled %d (the second: %v), expired %d; want the one that waited for its token expired",
			handled.Load(), second.Load(), st.Expired())
	}
	shutdown(t, m)
}

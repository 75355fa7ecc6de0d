package stage_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// collector is a single-threaded handler recording what it gets.
type collector struct {
	mu     sync.Mutex
	events []sink.Event
	got    chan struct{}
}

func (c *collector) SingleThreaded() {}
func (c *collector) HandleEvents(batch []sink.Event) error {
	c.mu.Lock()
	c.events = append(c.events, batch...)
	c.mu.Unlock()
	if c.got != nil {
		for range batch {
			c.got <- struct{}{}
		}
	}
	return nil
}
func (c *collector) snapshot() []sink.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]sink.Event(nil), c.events...)
}

func started(t *testing.T, m *stage.Manager) {
	t.Helper()
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Shutdown(ctx)
	})
}

func shutdown(t *testing.T, m *stage.Manager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func TestSingleThreadedOrdering(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	c := &collector{}
	st, err := m.CreateStage("Order", c, stage.StageConfig{
		ThreadPool: stage.ThreadPoolConfig{Min: 4, Max: 8}, // ignored: single-threaded
		Batching:   stage.BatchingConfig{Max: 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	started(t, m)
	if size := st.Stats().PoolSize; size != 1 {
		t.Fatalf("single-threaded stage runs %d goroutines, want 1", size)
	}
	const n = 5000
	for i := 0; i < n; i++ {
		if err := st.Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	if size := st.Stats().PoolSize; size != 1 {
		t.Fatalf("single-threaded stage under load runs %d goroutines, want 1", size)
	}
	shutdown(t, m)
	got := c.snapshot()
	if len(got) != n {
		t.Fatalf("got %d events, want %d", len(got), n)
	}
	for i, e := range got {
		if e != i {
			t.Fatalf("event %d is %v: order broken", i, e)
		}
	}
}

// forwarder passes each batch on to the next stage of a pipeline.
type forwarder struct {
	next string
	out  sink.Sink
}

func (f *forwarder) Init(c *stage.Context) error {
	var err error
	f.out, err = c.Sink(f.next)
	return err
}
func (f *forwarder) HandleEvents(batch []sink.Event) error {
	return sink.WaitPolicy{}.EnqueueManyWait(context.Background(), f.out, batch)
}

func TestNoLossMultiStageConcurrentProducers(t *testing.T) {
	for _, tm := range []string{"pool", "shared"} {
		t.Run(tm, func(t *testing.T) {
			m := stage.NewManager(stage.Options{ThreadManager: stage.ThreadManagerConfig{Type: tm, Threads: 3}})
			seen := make([]atomic.Int32, 100000)
			var total atomic.Int64
			sinkStage := stage.HandlerFunc(func(batch []sink.Event) error {
				for _, e := range batch {
					seen[e.(int)].Add(1)
				}
				total.Add(int64(len(batch)))
				return nil
			})
			names := []string{"A", "B", "C", "D"}
			for i, n := range names[:3] {
				_, err := m.CreateStage(n, &forwarder{next: names[i+1]}, stage.StageConfig{
					Queue:      stage.QueueConfig{Threshold: 512},
					ThreadPool: stage.ThreadPoolConfig{Min: 2, Max: 4},
					Batching:   stage.BatchingConfig{Max: 64},
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if _, err := m.CreateStage("D", sinkStage, stage.StageConfig{Queue: stage.QueueConfig{Threshold: 512}}); err != nil {
				t.Fatal(err)
			}
			started(t, m)
			a, _ := m.Stage("A")
			// The traced graph, sampled under traffic, has only the
			// pipeline's edges and its counts never go down.
			sampling, sampled := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(sampled)
				last := map[[2]string]uint64{}
				for {
					for _, e := range m.Edges() {
						k := [2]string{e.From, e.To}
						if e.From == "" && e.To != "A" {
							t.Errorf("edge from outside to %s under traffic: %v", e.To, e)
							return
						}
						if e.Count < last[k] {
							t.Errorf("edge %v went down from %d", e, last[k])
							return
						}
						last[k] = e.Count
					}
					select {
					case <-sampling:
						return
					default:
						runtime.Gosched()
					}
				}
			}()
			var wg sync.WaitGroup
			for p := 0; p < 4; p++ {
				wg.Add(1)
				go func(p int) {
					defer wg.Done()
					for i := p; i < len(seen); i += 4 {
						if err := sink.EnqueueWait(context.Background(), a.Sink(), i); err != nil {
							t.Error(err)
							return
						}
					}
				}(p)
			}
			wg.Wait()
			close(sampling)
			<-sampled
			shutdown(t, m)
			if total.Load() != int64(len(seen)) {
				t.Fatalf("delivered %d of %d", total.Load(), len(seen))
			}
			for i := range seen {
				if seen[i].Load() != 1 {
					t.Fatalf("event %d delivered %d times", i, seen[i].Load())
				}
			}
			edges := m.Edges()
			want := map[[2]string]uint64{{"", "A"}: 100000, {"A", "B"}: 100000, {"B", "C"}: 100000, {"C", "D"}: 100000}
			if len(edges) != len(want) {
				t.Fatalf("edges %v", edges)
			}
			for _, e := range edges {
				if want[[2]string{e.From, e.To}] != e.Count {
					t.Fatalf("edge %v, want %v", e, want)
				}
			}
		})
	}
}

type lifecycle struct {
	inits, destroys atomic.Int32
	handled         atomic.Int32
}

func (l *lifecycle) Init(*stage.Context) error { l.inits.Add(1); return nil }
func (l *lifecycle) Destroy() error            { l.destroys.Add(1); return nil }
func (l *lifecycle) HandleEvents(b []sink.Event) error {
	time.Sleep(time.Millisecond)
	l.handled.Add(int32(len(b)))
	return nil
}

func TestDestroyStageDrainsThenClosed(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	started(t, m)
	h := &lifecycle{}
	st, err := m.CreateStage("Temp", h, stage.StageConfig{Batching: stage.BatchingConfig{Max: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if h.inits.Load() != 1 {
		t.Fatal("Init did not run at CreateStage on a running manager")
	}
	for i := 0; i < 20; i++ {
		if err := st.Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.DestroyStage("Temp"); err != nil {
		t.Fatal(err)
	}
	if h.handled.Load() != 20 || h.destroys.Load() != 1 {
		t.Fatalf("handled %d destroyed %d", h.handled.Load(), h.destroys.Load())
	}
	if err := st.Sink().Enqueue(1); !errors.Is(err, sink.ErrClosed) {
		t.Fatalf("enqueue after destroy: %v", err)
	}
	if _, ok := m.Stage("Temp"); ok {
		t.Fatal("destroyed stage still listed")
	}
	if err := m.DestroyStage("Temp"); !errors.Is(err, stage.ErrNoStage) {
		t.Fatalf("second destroy: %v", err)
	}
	// the name is free again
	if _, err := m.CreateStage("Temp", &lifecycle{}, stage.StageConfig{}); err != nil {
		t.Fatal(err)
	}
}

func TestPanicsAndErrorsContained(t *testing.T) {
	var failures []stage.Failure
	var mu sync.Mutex
	m := stage.NewManager(stage.Options{OnFailure: func(f stage.Failure) {
		mu.Lock()
		failures = append(failures, f)
		mu.Unlock()
	}})
	var ok atomic.Int32
	h := stage.HandlerFunc(func(b []sink.Event) error {
		switch b[0].(int) % 10 {
		case 3:
			panic(fmt.Sprintf("boom %d", b[0]))
		case 7:
			return fmt.Errorf("bad event %d", b[0])
		}
		ok.Add(1)
		return nil
	})
	st, err := m.CreateStage("Fragile", h, stage.StageConfig{Batching: stage.BatchingConfig{Max: 1}, ThreadPool: stage.ThreadPoolConfig{Min: 2}})
	if err != nil {
		t.Fatal(err)
	}
	started(t, m)
	for i := 0; i < 100; i++ {
		if err := st.Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	shutdown(t, m)
	if ok.Load() != 80 {
		t.Fatalf("handled %d good events, want 80", ok.Load())
	}
	if st.Stats().Failures != 20 || m.Failures() != 20 || len(failures) != 20 {
		t.Fatalf("failures: stats %d manager %d reported %d", st.Stats().Failures, m.Failures(), len(failures))
	}
	panics := 0
	for _, f := range failures {
		if errors.Is(f.Err, stage.ErrHandlerPanic) {
			panics++
			if f.Events[0].(int)%10 != 3 {
				t.Fatalf("panic attributed to %v", f.Events)
			}
		}
	}
	if panics != 10 {
		t.Fatalf("%d panics reported, want 10", panics)
	}
}

func TestShutdownDrainsAndRefusesOutsiders(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	h := &lifecycle{}
	st, _ := m.CreateStage("Slow", h, stage.StageConfig{Batching: stage.BatchingConfig{Max: 1}})
	started(t, m)
	for i := 0; i < 50; i++ {
		_ = st.Sink().Enqueue(i)
	}
	shutdown(t, m)
	if h.handled.Load() != 50 || h.destroys.Load() != 1 {
		t.Fatalf("handled %d destroys %d", h.handled.Load(), h.destroys.Load())
	}
	if err := st.Sink().Enqueue(1); !errors.Is(err, sink.ErrClosed) {
		t.Fatalf("after shutdown: %v", err)
	}
	if err := m.Shutdown(context.Background()); !errors.Is(err, stage.ErrManagerClosed) {
		t.Fatalf("second shutdown: %v", err)
	}
}

type stuck struct{ release chan struct{} }

func (s *stuck) HandleEvents([]sink.Event) error { <-s.release; return nil }

func TestShutdownReportsStuckStages(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	h := &stuck{release: make(chan struct{})}
	st, _ := m.CreateStage("Stuck", h, stage.StageConfig{Batching: stage.BatchingConfig{Max: 1}})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		_ = st.Sink().Enqueue(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := m.Shutdown(ctx)
	close(h.release)
	if !errors.Is(err, stage.ErrNotStopped) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v", err)
	}
}

type failingInit struct{ lifecycle }

func (f *failingInit) Init(*stage.Context) error { return errors.New("no database") }

func TestInitFailure(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	good := &lifecycle{}
	_, _ = m.CreateStage("Good", good, stage.StageConfig{})
	_, _ = m.CreateStage("Bad", &failingInit{}, stage.StageConfig{})
	err := m.Start(context.Background())
	if !errors.Is(err, stage.ErrInit) {
		t.Fatalf("Start = %v", err)
	}
	if good.destroys.Load() != 1 {
		t.Fatal("initialized stage not destroyed after a later Init failed")
	}
}

func TestCreateStageErrors(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	if _, err := m.CreateStage("X", &lifecycle{}, stage.StageConfig{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		h    stage.Handler
		cfg  stage.StageConfig
		want error
	}{
		{"X", &lifecycle{}, stage.StageConfig{}, stage.ErrStageExists},
		{"", &lifecycle{}, stage.StageConfig{}, stage.ErrInvalidConfig},
		{"Y", nil, stage.StageConfig{}, stage.ErrInvalidConfig},
		{"Z", &lifecycle{}, stage.StageConfig{ThreadPool: stage.ThreadPoolConfig{Max: -1}}, stage.ErrInvalidConfig},
		{"W", &lifecycle{}, stage.StageConfig{ThreadPool: stage.ThreadPoolConfig{Min: 5, Max: 2}}, stage.ErrInvalidConfig},
	}
	for _, tt := range tests {
		if _, err := m.CreateStage(tt.name, tt.h, tt.cfg); !errors.Is(err, tt.want) {
			t.Errorf("CreateStage(%q) = %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestTimersAndSignals(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	c := &collector{got: make(chan struct{}, 10)}
	st, _ := m.CreateStage("Listener", c, stage.StageConfig{})
	m.Subscribe(stage.SignalStagesInitialized, st.Sink())
	started(t, m)
	<-c.got
	if _, ok := c.snapshot()[0].(stage.StagesInitialized); !ok {
		t.Fatalf("first event %T", c.snapshot()[0])
	}
	if _, err := m.After(time.Millisecond, st.Sink(), "tick"); err != nil {
		t.Fatal(err)
	}
	cancelled, _ := m.After(time.Hour, st.Sink(), "never")
	if !cancelled.Stop() || cancelled.Stop() {
		t.Fatal("Stop should report true once")
	}
	<-c.got
	if got := c.snapshot(); got[1] != "tick" {
		t.Fatalf("got %v", got)
	}
	// a timer whose target rejects is counted
	full, _ := m.CreateStage("Full", &lifecycle{}, stage.StageConfig{})
	full.Sink().SetPredicate(sink.PredicateFunc(func(sink.Event) bool { return false }))
	_, _ = m.After(0, full.Sink(), 1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		fired, rejected := m.TimerStats()
		if fired == 2 && rejected == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fired %d rejected %d", fired, rejected)
		}
		time.Sleep(time.Millisecond)
	}
}

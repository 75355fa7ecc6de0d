package stage_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Every handler instance is initialized once and destroyed once, whatever
// races between supervisor restarts, DestroyStage and Shutdown.

// lives counts Init and Destroy calls per handler instance.
type lives struct {
	mu       sync.Mutex
	inits    map[int]int
	destroys map[int]int
	n        int
	// first, if set, is called by the first Destroy of instance 1;
	// second is closed by its second Destroy.
	first  func()
	second chan struct{}
}

func newLives() *lives { return &lives{inits: map[int]int{}, destroys: map[int]int{}} }

func (l *lives) factory() stage.Factory {
	return func() stage.Handler {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.n++
		return &life{l: l, id: l.n}
	}
}

type life struct {
	l  *lives
	id int
}

func (h *life) Init(*stage.Context) error {
	h.l.mu.Lock()
	h.l.inits[h.id]++
	h.l.mu.Unlock()
	return nil
}

func (h *life) Destroy() error {
	h.l.mu.Lock()
	h.l.destroys[h.id]++
	first := h.id == 1 && h.l.destroys[h.id] == 1 && h.l.first != nil
	f := h.l.first
	if h.id == 1 && h.l.destroys[h.id] == 2 && h.l.second != nil {
		close(h.l.second)
	}
	h.l.mu.Unlock()
	if first {
		f()
	}
	return nil
}

func (h *life) HandleEvents(b []sink.Event) error {
	for _, e := range b {
		if e == "boom" {
			return errors.New("boom")
		}
	}
	return nil
}

// check fails t unless every handler made so far was initialized and then
// destroyed exactly once.
func (l *lives) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := 1; id <= l.n; id++ {
		if l.inits[id] != 1 || l.destroys[id] != 1 {
			t.Errorf("handler %d of %d: initialized %d times, destroyed %d times", id, l.n, l.inits[id], l.destroys[id])
		}
	}
}

// TestDestroyStageDuringRestart: DestroyStage while the stage's supervisor
// is replacing its handler neither destroys the old handler twice nor
// leaves the new one undestroyed.
func TestDestroyStageDuringRestart(t *testing.T) {
	for _, tm := range []string{"pool", "shared"} {
		t.Run(tm, func(t *testing.T) {
			m := stage.NewManager(stage.Options{ThreadManager: stage.ThreadManagerConfig{Type: tm, Threads: 1}})
			l := newLives()
			inRestart := make(chan struct{})
			l.second = make(chan struct{})
			l.first = func() {
				close(inRestart)
				select { // hold the restart until DestroyStage has had its chance
				case <-l.second: // DestroyStage destroyed handler 1 again
				case <-time.After(200 * time.Millisecond): // detection window only
				}
			}
			st, err := m.CreateSupervised("S", l.factory(), stage.StageConfig{Supervisor: &stage.SupervisorConfig{RestartOn: stage.RestartOnError}})
			if err != nil {
				t.Fatal(err)
			}
			started(t, m)
			if err := st.Sink().Enqueue("boom"); err != nil {
				t.Fatal(err)
			}
			<-inRestart // DestroyStage while the restart destroys handler 1
			if err := m.DestroyStage("S"); err != nil {
				t.Fatal(err)
			}
			l.check(t)
		})
	}
}

// TestConcurrentDestroyStage: two DestroyStage calls on one stage destroy
// its handler once; the loser gets ErrNoStage.
func TestConcurrentDestroyStage(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	started(t, m)
	for i := 0; i < 200; i++ {
		name := fmt.Sprint("S", i)
		h := &lifecycle{}
		if _, err := m.CreateStage(name, h, stage.StageConfig{}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var ok, gone atomic.Int32
		start := make(chan struct{})
		for j := 0; j < 2; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				switch err := m.DestroyStage(name); {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, stage.ErrNoStage):
					gone.Add(1)
				default:
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if ok.Load() != 1 || gone.Load() != 1 || h.destroys.Load() != 1 {
			t.Fatalf("round %d: %d succeeded, %d found no stage, Destroy ran %d times", i, ok.Load(), gone.Load(), h.destroys.Load())
		}
	}
}

// TestDestroyStageDuringShutdown: a stage destroyed while the manager
// shuts down is destroyed once.
func TestDestroyStageDuringShutdown(t *testing.T) {
	for i := 0; i < 20; i++ {
		m := stage.NewManager(stage.Options{})
		h := &lifecycle{}
		if _, err := m.CreateStage("S", h, stage.StageConfig{}); err != nil {
			t.Fatal(err)
		}
		if err := m.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _ = m.DestroyStage("S") }()
		go func() { defer wg.Done(); _ = m.Shutdown(context.Background()) }()
		wg.Wait()
		if got := h.destroys.Load(); got != 1 {
			t.Fatalf("round %d: Destroy ran %d times", i, got)
		}
	}
}

// Cancelling Start's context stops the stages at once: intake closes and
// the queued events are discarded and counted, never left in a queue that
// nobody serves while Enqueue keeps answering nil.
func TestStartContextEndAbandonsQueues(t *testing.T) {
	for _, tm := range []string{"pool", "shared"} {
		t.Run(tm, func(t *testing.T) {
			m := stage.NewManager(stage.Options{ThreadManager: stage.ThreadManagerConfig{Type: tm, Threads: 1}})
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			st, err := m.CreateStage("Blocked", stage.HandlerFunc(func([]sink.Event) error {
				once.Do(func() { close(entered) })
				<-release
				return nil
			}), stage.StageConfig{Batching: stage.BatchingConfig{Max: 1}, ThreadPool: stage.ThreadPoolConfig{Max: 1}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			if err := m.Start(ctx); err != nil {
				t.Fatal(err)
			}
			const queued = 5
			for i := 0; i <= queued; i++ {
				if err := st.Sink().Enqueue(i); err != nil {
					t.Fatal(err)
				}
			}
			<-entered // one event in the handler, the others queued
			cancel()
			deadline := time.Now().Add(10 * time.Second)
			for st.Stats().Removed != queued {
				if time.Now().After(deadline) {
					t.Fatalf("removed %d events after the context ended, want %d", st.Stats().Removed, queued)
				}
				time.Sleep(time.Millisecond)
			}
			if err := st.Sink().Enqueue("late"); !errors.Is(err, sink.ErrClosed) {
				t.Fatalf("enqueue after the context ended: %v, want ErrClosed", err)
			}
			close(release)
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer scancel()
			if err := m.Shutdown(sctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			if got := st.Stats(); got.Events != 1 || got.QueueLen != 0 {
				t.Fatalf("handled %d, queued %d; want 1 handled, none queued", got.Events, got.QueueLen)
			}
		})
	}
}

// blockedLife blocks in its handler until released and counts Destroy.
type blockedLife struct {
	entered, release chan struct{}
	once             sync.Once
	destroys         atomic.Int32
}

func (h *blockedLife) HandleEvents([]sink.Event) error {
	h.once.Do(func() { close(h.entered) })
	<-h.release
	return nil
}
func (h *blockedLife) Destroy() error { h.destroys.Add(1); return nil }

// DestroyStageContext bounds the wait for a stage that does not drain: the
// queued events are discarded and reported, the running handler is not
// destroyed under its feet, and the stage is gone.
func TestDestroyStageContextBoundsTheWait(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	h := &blockedLife{entered: make(chan struct{}), release: make(chan struct{})}
	st, err := m.CreateStage("Stuck", h, stage.StageConfig{Batching: stage.BatchingConfig{Max: 1}, ThreadPool: stage.ThreadPoolConfig{Max: 1}})
	if err != nil {
		t.Fatal(err)
	}
	started(t, m)
	for i := 0; i < 4; i++ {
		if err := st.Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	<-h.entered
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err = m.DestroyStageContext(ctx, "Stuck")
	if !errors.Is(err, stage.ErrNotStopped) || !errors.Is(err, stage.ErrEventsDiscarded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("DestroyStageContext = %v, want ErrNotStopped, ErrEventsDiscarded and the deadline", err)
	}
	if got := st.Stats().Removed; got != 3 {
		t.Fatalf("removed %d events, want the 3 queued behind the stuck one", got)
	}
	if _, ok := m.Stage("Stuck"); ok {
		t.Fatal("the stage is still there")
	}
	if err := st.Sink().Enqueue("late"); !errors.Is(err, sink.ErrClosed) {
		t.Fatalf("enqueue after destroy: %v, want ErrClosed", err)
	}
	if n := h.destroys.Load(); n != 0 {
		t.Fatalf("Destroy ran %d times while the handler was running", n)
	}
	close(h.release)
}

// Destroying a stage of a manager never started: its queued events would
// never be handled, so they are discarded and the caller is told.
func TestDestroyStageBeforeStartReportsQueuedEvents(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	st, err := m.CreateStage("Idle", stage.HandlerFunc(func([]sink.Event) error { return nil }), stage.StageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := st.Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.DestroyStage("Idle"); !errors.Is(err, stage.ErrEventsDiscarded) {
		t.Fatalf("DestroyStage = %v, want ErrEventsDiscarded", err)
	}
	if got := st.Stats().Removed; got != 3 {
		t.Fatalf("removed %d, want 3", got)
	}
	if _, err := m.CreateStage("Empty", stage.HandlerFunc(func([]sink.Event) error { return nil }), stage.StageConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := m.DestroyStage("Empty"); err != nil {
		t.Fatalf("DestroyStage of an empty stage = %v", err)
	}
}

// TestRunShutsDownOnCancel: Run starts the manager, and when its context
// ends shuts it down gracefully: the queued events are handled, not
// abandoned as when Start's context ends.
func TestRunShutsDownOnCancel(t *testing.T) {
	reg := stage.NewRegistry()
	var handled atomic.Int64
	release := make(chan struct{})
	reg.Register("t.Slow", func() stage.Handler {
		return stage.HandlerFunc(func(b []sink.Event) error {
			<-release
			handled.Add(int64(len(b)))
			return nil
		})
	})
	m, err := stage.Parse([]byte("global: {shutdown: 30s}\nstages:\n  S: {handler: t.Slow, threadpool: {max: 1}}\n"), reg)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := m.Stage("S")
	for i := 0; i < 10; i++ {
		if err := st.Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Run still starts, then shuts down at once, draining
	go close(release)
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := handled.Load(); got != 10 {
		t.Fatalf("handled %d of 10 events", got)
	}
	if err := m.Shutdown(context.Background()); !errors.Is(err, stage.ErrManagerClosed) {
		t.Fatalf("second Shutdown: %v, want ErrManagerClosed", err)
	}
}

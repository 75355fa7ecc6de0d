package threadpool

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
	"github.com/sandstorm-go/sandstorm/sink"
)

// testStage is a Stage whose batches go to a function.
type testStage struct {
	q     *sink.Queue
	batch int
	run   func([]sink.Event)
}

func newTestStage(run func([]sink.Event)) *testStage {
	return &testStage{q: sink.NewQueue(0), batch: 4, run: run}
}

func (s *testStage) Name() string                           { return "test" }
func (s *testStage) Queue() *sink.Queue                     { return s.q }
func (s *testStage) BatchSize() int                         { return s.batch }
func (s *testStage) RunBatch(es, _ []sink.Event, _ []int64) { s.run(es) }

// TestWaitPrefersFinished: a runner that has finished reports so even to a
// caller whose context has already ended.
func TestWaitPrefersFinished(t *testing.T) {
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	t.Run("pool", func(t *testing.T) {
		st := newTestStage(func([]sink.Event) {})
		p := NewPool(st, Config{Max: 2, Initial: 2})
		p.Start(context.Background())
		st.q.Close()
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			if err := p.Wait(expired); err != nil {
				t.Fatalf("Wait on a finished pool with an expired context = %v", err)
			}
		}
	})
	t.Run("shared", func(t *testing.T) {
		sp := NewSharedPool(SharedConfig{Threads: 2})
		st := newTestStage(func([]sink.Event) {})
		r := sp.Add(st, 1, false)
		sp.Start(context.Background())
		defer sp.Stop()
		st.q.Close()
		if err := r.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			if err := r.Wait(expired); err != nil {
				t.Fatalf("Wait on a finished stage with an expired context = %v", err)
			}
		}
	})
}

// TestSharedShutdownBoundedByContext: Shutdown returns when its context
// ends even while a goroutine is stuck in a handler, and Stop returns once
// the handler does.
func TestSharedShutdownBoundedByContext(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	st := newTestStage(func([]sink.Event) {
		entered <- struct{}{}
		<-release
	})
	sp := NewSharedPool(SharedConfig{Threads: 2})
	sp.Add(st, 1, false)
	sp.Start(context.Background())
	if err := st.q.Enqueue(1); err != nil {
		t.Fatal(err)
	}
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sp.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown with a stuck handler = %v, want context.Canceled", err)
	}
	close(release)
	sp.Stop()
	if err := sp.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown after every goroutine exited = %v", err)
	}
	// A pool never started has nothing to wait for.
	if err := NewSharedPool(SharedConfig{}).Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown of an unstarted pool = %v", err)
	}
}

// TestFinishedPoolIsCollectable: a pool whose stage was drained holds no
// registration on the long-lived context it was started with, so it (and
// its stage and handler) can be garbage collected while that context lives
// on — stages created and destroyed at run time must not pile up.
func TestFinishedPoolIsCollectable(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 10
	refs := make([]weak.Pointer[testStage], n)
	for i := range refs {
		st := newTestStage(func([]sink.Event) {})
		refs[i] = weak.Make(st)
		p := NewPool(st, Config{Max: 2, Initial: 2, Controller: ControllerConfig{Enabled: true, Interval: time.Hour}})
		p.Start(ctx)
		_ = st.q.Enqueue(i)
		st.q.Close()
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.GC()
	live := 0
	for _, r := range refs {
		if r.Value() != nil {
			live++
		}
	}
	if live > 0 {
		t.Fatalf("%d of %d finished pools are still reachable while their start context lives", live, n)
	}
}

// TestWaitAfterContextEnds: once Start's context has ended the goroutines
// are gone and nothing will drain the stage: Wait returns instead of
// waiting for a drain that cannot happen, on both thread managers.
func TestWaitAfterContextEnds(t *testing.T) {
	expired, cancelExpired := context.WithCancel(context.Background())
	cancelExpired()
	t.Run("pool", func(t *testing.T) {
		release := make(chan struct{})
		st := newTestStage(func([]sink.Event) { <-release })
		ctx, cancel := context.WithCancel(context.Background())
		p := NewPool(st, Config{Max: 1})
		p.Start(ctx)
		for i := 0; i < 3; i++ {
			_ = st.q.Enqueue(i)
		}
		cancel()
		close(release) // the worker finishes its batches, sees the end
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(expired); err != nil {
			t.Fatalf("Wait after the pool's context ended = %v", err)
		}
	})
	t.Run("shared", func(t *testing.T) {
		release := make(chan struct{})
		st := newTestStage(func([]sink.Event) { <-release })
		ctx, cancel := context.WithCancel(context.Background())
		sp := NewSharedPool(SharedConfig{Threads: 1})
		r := sp.Add(st, 1, false)
		sp.Start(ctx)
		for i := 0; i < 3; i++ {
			_ = st.q.Enqueue(i)
		}
		cancel()
		close(release)
		sp.Stop() // every goroutine has exited
		st.q.Close()
		if err := r.Wait(expired); err != nil {
			t.Fatalf("Wait after the pool's goroutines exited = %v", err)
		}
	})
}

// TestSharedStress runs several stages on one shared pool (plain, keyed,
// single-threaded), with producers, and a goroutine pausing and resuming
// the queues as supervisors do, then closes the queues: every event is
// handled exactly once, a single-threaded stage never runs two batches at
// once, and every stage's Wait returns (no goroutine sleeps while a queue
// has runnable events).
func TestSharedStress(t *testing.T) {
	type kind struct {
		keyed, single bool
	}
	kinds := []kind{{}, {keyed: true}, {single: true}, {keyed: true, single: true}}
	const perStage = 4000
	sp := NewSharedPool(SharedConfig{Threads: 3})
	type stageRun struct {
		st      *testStage
		r       Runner
		seen    []atomic.Int32
		busy    atomic.Int32
		overlap atomic.Bool
	}
	var runs []*stageRun
	for i, k := range kinds {
		sr := &stageRun{seen: make([]atomic.Int32, perStage)}
		sr.st = newTestStage(func(es []sink.Event) {
			if sr.busy.Add(1) > 1 && k.single {
				sr.overlap.Store(true)
			}
			for _, e := range es {
				sr.seen[e.(int)].Add(1)
			}
			runtime.Gosched()
			sr.busy.Add(-1)
			if k.keyed {
				sinkrt.Of(sr.st.q).Release(es)
			}
		})
		sr.st.q = sink.NewQueue(64)
		if k.keyed {
			key := func(e sink.Event) (string, bool) { return string(rune('a' + e.(int)%3)), true }
			if err := sr.st.q.SetScheduler(sink.NewKeyed(key, nil)); err != nil {
				t.Fatal(err)
			}
		}
		sr.r = sp.Add(sr.st, i+1, k.single)
		runs = append(runs, sr)
	}
	sp.Start(context.Background())
	defer sp.Stop()

	stop := make(chan struct{})
	pauserDone := make(chan struct{})
	go func() {
		defer close(pauserDone)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			q := runs[i%len(runs)].st.q
			sinkrt.Of(q).Pause()
			runtime.Gosched()
			sinkrt.Of(q).Resume()
		}
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, sr := range runs {
			for i := 0; i < perStage; i++ {
				if err := sink.EnqueueWait(context.Background(), sr.st.q, i); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	<-done
	close(stop)
	<-pauserDone
	guard, cancel := context.WithTimeout(context.Background(), 60*time.Second) // hang guard only
	defer cancel()
	for i, sr := range runs {
		sr.st.q.Close()
		if err := sr.r.Wait(guard); err != nil {
			t.Fatalf("stage %d (%+v): Wait = %v with %d queued, %d runnable", i, kinds[i], err, sr.st.q.Len(), sinkrt.Of(sr.st.q).Runnable())
		}
		for j := range sr.seen {
			if n := sr.seen[j].Load(); n != 1 {
				t.Fatalf("stage %d (%+v): event %d handled %d times", i, kinds[i], j, n)
			}
		}
		if sr.overlap.Load() {
			t.Fatalf("stage %d (%+v): single-threaded stage ran two batches at once", i, kinds[i])
		}
	}
}

// TestPoolResizeStress resizes a pool up and down while producers fill a
// keyed queue and a goroutine pauses and resumes it: every event is handled
// exactly once and Wait returns after Close (no lost wake-up, no worker
// leaked by a shrink).
func TestPoolResizeStress(t *testing.T) {
	const total = 5000
	seen := make([]atomic.Int32, total)
	var st *testStage
	st = newTestStage(func(es []sink.Event) {
		for _, e := range es {
			seen[e.(int)].Add(1)
		}
		runtime.Gosched()
		sinkrt.Of(st.q).Release(es)
	})
	st.q = sink.NewQueue(128)
	key := func(e sink.Event) (string, bool) { return string(rune('a' + e.(int)%5)), true }
	if err := st.q.SetScheduler(sink.NewKeyed(key, nil)); err != nil {
		t.Fatal(err)
	}
	p := NewPool(st, Config{Min: 1, Max: 6, Initial: 2})
	p.Start(context.Background())
	stop := make(chan struct{})
	helpers := make(chan struct{}, 2)
	go func() { // resizer
		defer func() { helpers <- struct{}{} }()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p.resize(1 + i%6)
			runtime.Gosched()
		}
	}()
	go func() { // pauser
		defer func() { helpers <- struct{}{} }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			sinkrt.Of(st.q).Pause()
			runtime.Gosched()
			sinkrt.Of(st.q).Resume()
			// Yield while resumed too: on one CPU the workers would
			// otherwise only ever run while the queue is paused.
			runtime.Gosched()
		}
	}()
	for i := 0; i < total; i++ {
		if err := sink.EnqueueWait(context.Background(), st.q, i); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	<-helpers
	<-helpers
	st.q.Close()
	guard, cancel := context.WithTimeout(context.Background(), 60*time.Second) // hang guard only
	defer cancel()
	if err := p.Wait(guard); err != nil {
		t.Fatalf("Wait = %v with %d queued, %d runnable, %d workers", err, st.q.Len(), sinkrt.Of(st.q).Runnable(), p.Size())
	}
	for i := range seen {
		if n := seen[i].Load(); n != 1 {
			t.Fatalf("event %d handled %d times", i, n)
		}
	}
	if p.Size() != 0 {
		t.Fatalf("%d workers left after Wait", p.Size())
	}
}

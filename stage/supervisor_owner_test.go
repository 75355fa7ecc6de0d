package stage_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestHeldRestartLeavesSupervisorResponsive: while S1's restart is held
// up, by the backoff timer of a crash loop that has not fired or by a
// batch that does not return, the supervisor goroutine that owns every tree still answers:
// S2 (another tree) fails and restarts, Supervisors answers, supervised
// stages are created and destroyed. S1 restarts once released, and the
// event queued meanwhile reaches its new handler. The fake timers decide
// when each backoff ends.
func TestHeldRestartLeavesSupervisorResponsive(t *testing.T) {
	for _, hold := range []string{"backoff", "hung batch"} {
		t.Run(hold, func(t *testing.T) {
			timers := make(fakeTimers, 4)
			m := stage.NewManager(stage.Options{After: timers.After})
			p := startHangerPair(t, m)
			s1, s2, mon1, mon2 := p.s1, p.s2, p.mon1, p.mon2

			held := "queued@2"
			var t1 fakeTimer
			if hold == "hung batch" {
				_ = s1.Sink().Enqueue("hang")
				<-p.entered
				// The first restart waits no backoff: it waits for "hang".
				_ = s1.Sink().Enqueue("boom")
				// The queue is paused before monitors hear of the failure:
				// "queued" waits for the restart.
				mon1.until(t, func(e sink.Event) bool { _, ok := e.(stage.StageFailed); return ok })
			} else {
				// A crash loop: the restarted handler fails before it
				// handled anything, so its restart backs off.
				_ = s1.Sink().Enqueue("boom")
				mon1.until(t, isRestarted)
				_ = s1.Sink().Enqueue("boom")
				t1 = timers.next(t) // S1's backoff, held until fired below
				held = "queued@3"
			}
			_ = s1.Sink().Enqueue("queued")
			restarts := s1.Stats().Restarts

			_ = s2.Sink().Enqueue("boom") // its first restart: no backoff
			mon2.until(t, isRestarted)
			_ = s2.Sink().Enqueue("after")

			if got := m.Supervisors(); !slices.Equal(got, []string{"S1", "S2"}) {
				t.Fatalf("supervisors %v", got)
			}
			f3, _ := hangerFactory(p.entered, p.release)
			if _, err := m.CreateSupervised("S3", f3, p.cfg); err != nil {
				t.Fatal(err)
			}
			if got := m.Supervisors(); !slices.Equal(got, []string{"S1", "S2", "S3"}) {
				t.Fatalf("supervisors %v", got)
			}
			if err := m.DestroyStage("S3"); err != nil {
				t.Fatal(err)
			}
			if got := m.Supervisors(); !slices.Equal(got, []string{"S1", "S2"}) {
				t.Fatalf("supervisors %v", got)
			}
			if r := s1.Stats().Restarts; r != restarts {
				t.Fatalf("S1 restarted %d times while held", r-restarts)
			}

			if hold == "backoff" {
				t1.fire <- time.Time{}
			} else {
				p.letGo()
			}
			mon1.until(t, isRestarted)
			shutdown(t, m)
			if got := p.handled1(); !slices.Equal(got, []string{held}) {
				t.Fatalf("S1 handled %v", got)
			}
			if got := p.handled2(); !slices.Equal(got, []string{"after@2"}) {
				t.Fatalf("S2 handled %v", got)
			}
		})
	}
}

// lifeCount counts the handlers a stage made and destroyed.
type lifeCount struct{ inits, destroys atomic.Int32 }

// mortal panics on "crash" and counts its Init and Destroy.
type mortal struct{ c *lifeCount }

func (h *mortal) Init(*stage.Context) error { h.c.inits.Add(1); return nil }
func (h *mortal) Destroy() error            { h.c.destroys.Add(1); return nil }
func (h *mortal) HandleEvents(b []sink.Event) error {
	for _, e := range b {
		if e == "crash" {
			panic("crash")
		}
	}
	return nil
}

// TestSupervisedStagesComeAndGoDuringFailures: supervised stages are
// created and destroyed from several goroutines while they and a
// long-lived supervised stage crash and restart. Every destroyed stage
// leaves the supervisors and destroyed each handler it made exactly once
// (none made after it ended); the long-lived one's supervision goes on;
// shutdown is clean. Run under -race.
func TestSupervisedStagesComeAndGoDuringFailures(t *testing.T) {
	const workers, rounds = 4, 50
	m := stage.NewManager(stage.Options{After: immediate})
	sup := &stage.SupervisorConfig{MaxRestarts: 1 << 20, Period: time.Hour}
	steadyLife := &lifeCount{}
	steady, err := m.CreateSupervised("Steady", func() stage.Handler { return &mortal{steadyLife} },
		stage.StageConfig{Supervisor: sup})
	if err != nil {
		t.Fatal(err)
	}
	started(t, m)

	stop := make(chan struct{})
	var crashes sync.WaitGroup
	crashes.Add(1)
	go func() { // keeps Steady's supervisor busy
		defer crashes.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = sink.EnqueueWait(t.Context(), steady.Sink(), "crash")
		}
	}()

	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				name := fmt.Sprintf("w%d-%d", w, i)
				life := &lifeCount{}
				st, err := m.CreateSupervised(name, func() stage.Handler { return &mortal{life} },
					stage.StageConfig{Supervisor: sup})
				if err != nil {
					t.Error(err)
					return
				}
				mon := newChanSink(64)
				_, _ = m.Monitor(name, mon)
				for _, e := range []string{"crash", "ok", "crash", "ok"} {
					_ = st.Sink().Enqueue(e)
				}
				if i%2 == 0 { // else destroy it while it restarts
					mon.until(t, isRestarted)
				}
				if err := m.DestroyStage(name); err != nil {
					t.Errorf("destroy %s: %v", name, err)
					return
				}
				if in, de := life.inits.Load(), life.destroys.Load(); in != de || in == 0 {
					t.Errorf("%s: %d handlers initialized, %d destroyed", name, in, de)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	crashes.Wait()
	if got := m.Supervisors(); !slices.Equal(got, []string{"Steady"}) {
		t.Fatalf("supervisors after the others were destroyed: %v", got)
	}
	shutdown(t, m)
	if err := m.Err(); err != nil {
		t.Fatalf("Err = %v", err)
	}
	if in, de := steadyLife.inits.Load(), steadyLife.destroys.Load(); in != de || steady.Stats().Restarts == 0 {
		t.Fatalf("Steady: %d inits, %d destroys, %d restarts", in, de, steady.Stats().Restarts)
	}
}

// TestSupervisionOutlivesItsGoroutine: the supervision tree answers
// before Start, after Start's context ended (the supervisor goroutine
// returns and hands the tree back) and after Shutdown: supervised stages
// can still be created and destroyed, and Supervisors lists them.
func TestSupervisionOutlivesItsGoroutine(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	noop := func() stage.Handler { return stage.HandlerFunc(func([]sink.Event) error { return nil }) }
	if _, err := m.CreateSupervised("A", noop, stage.StageConfig{}); err != nil {
		t.Fatal(err)
	}
	if got := m.Supervisors(); !slices.Equal(got, []string{"A"}) {
		t.Fatalf("before Start: %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel() // supervision ends with Start's context, at once or while the next calls run
	if _, err := m.CreateSupervised("B", noop, stage.StageConfig{}); err != nil {
		t.Fatal(err)
	}
	if got := m.Supervisors(); !slices.Equal(got, []string{"A", "B"}) {
		t.Fatalf("after the context ended: %v", got)
	}
	if err := m.DestroyStage("A"); err != nil {
		t.Fatal(err)
	}
	shutdown(t, m)
	if got := m.Supervisors(); !slices.Equal(got, []string{"B"}) {
		t.Fatalf("after Shutdown: %v", got)
	}
}

// TestDestroyDuringBackoff: DestroyStage of a crash-looping stage whose
// restart waits for its backoff (a fake timer that never fires) does not
// wait for the backoff: the restart is called off, and the stage's last
// handler is destroyed once.
func TestDestroyDuringBackoff(t *testing.T) {
	timers := make(fakeTimers, 1)
	m := stage.NewManager(stage.Options{After: timers.After})
	life := &lifeCount{}
	st, err := m.CreateSupervised("S", func() stage.Handler { return &mortal{life} }, stage.StageConfig{
		Supervisor: &stage.SupervisorConfig{MaxRestarts: 10, Period: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	mon := newChanSink(100)
	_, _ = m.Monitor("S", mon)
	started(t, m)
	_ = st.Sink().Enqueue("crash")
	mon.until(t, isRestarted) // the first restart: no backoff
	_ = st.Sink().Enqueue("crash")
	timers.next(t) // the crash loop's backoff, never fired
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := m.DestroyStageContext(ctx, "S"); err != nil {
		t.Fatalf("DestroyStageContext: %v", err)
	}
	if in, de := life.inits.Load(), life.destroys.Load(); in != 2 || de != 2 {
		t.Fatalf("%d handlers initialized, %d destroyed; want 2 and 2", in, de)
	}
	if r := st.Stats().Restarts; r != 1 {
		t.Fatalf("%d restarts, want 1 (the second called off)", r)
	}
}

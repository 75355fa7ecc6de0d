package stage_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

var errUpstream = errors.New("upstream: connection refused")

// TestFailEventUnderLoadKeepsRunning reproduces issue 16's first service:
// a supervised stage (default supervisor) that fails requests with
// FailEvent for its upstream's errors, under load from several producers,
// never restarts nor shuts itself down: every event is handled or failed,
// each failure reported once, and the manager stays up until Shutdown.
func TestFailEventUnderLoadKeepsRunning(t *testing.T) {
	const producers, per = 4, 1000
	var handled, inits atomic.Int64
	m := stage.NewManager(stage.Options{})
	st, err := m.CreateSupervised("Service", func() stage.Handler {
		inits.Add(1)
		return stage.HandlerFunc(func(b []sink.Event) error {
			var errs []error
			for i, e := range b {
				if e.(int)%3 == 0 { // every third request's upstream fails
					errs = append(errs, stage.FailEvent(i, errUpstream))
					continue
				}
				handled.Add(1)
			}
			return errors.Join(errs...)
		})
	}, stage.StageConfig{Batching: stage.BatchingConfig{Max: 8}, ThreadPool: stage.ThreadPoolConfig{Min: 2, Max: 2}})
	if err != nil {
		t.Fatal(err)
	}
	started(t, m)
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if err := sink.EnqueueWait(t.Context(), st.Sink(), p*per+i); err != nil {
					t.Errorf("enqueue: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-m.Done():
		t.Fatalf("manager stopped itself: %v", m.Err())
	default:
	}
	shutdown(t, m)
	const total = producers * per
	failed := int64(st.Stats().Failures)
	if handled.Load()+failed != total || failed != (total+2)/3 {
		t.Fatalf("handled %d + failed %d, want %d of %d failed", handled.Load(), failed, (total+2)/3, total)
	}
	if r := st.Stats().Restarts; r != 0 || inits.Load() != 1 {
		t.Fatalf("restarts %d, handlers made %d: FailEvent counted as a crash", r, inits.Load())
	}
	if err := m.Err(); err != nil {
		t.Fatalf("Err = %v", err)
	}
}

// TestRestartOn: which failures restart a handler, per restartOn.
func TestRestartOn(t *testing.T) {
	for _, tt := range []struct {
		on      stage.RestartOn
		panics  bool
		restart bool
	}{
		{"", false, false},
		{"", true, true},
		{stage.RestartOnPanic, false, false},
		{stage.RestartOnPanic, true, true},
		{stage.RestartOnError, false, true},
		{stage.RestartOnError, true, true},
	} {
		t.Run(fmt.Sprintf("%s/panic=%v", tt.on, tt.panics), func(t *testing.T) {
			m := stage.NewManager(stage.Options{After: immediate})
			st, err := m.CreateSupervised("S", func() stage.Handler {
				return stage.HandlerFunc(func([]sink.Event) error {
					if tt.panics {
						panic("boom")
					}
					return errBad
				})
			}, stage.StageConfig{Supervisor: &stage.SupervisorConfig{RestartOn: tt.on}})
			if err != nil {
				t.Fatal(err)
			}
			mon := newChanSink(10)
			_, _ = m.Monitor("S", mon)
			started(t, m)
			_ = st.Sink().Enqueue(1)
			// A crash pauses the stage before its failure is reported, so
			// the failure decides: a restart follows, or none ever does.
			events := mon.until(t, func(e sink.Event) bool { _, ok := e.(stage.StageFailed); return ok })
			if tt.restart {
				events = append(events, mon.until(t, isRestarted)...)
			}
			shutdown(t, m)
			restarted := false
			for _, e := range append(events, mon.rest()...) {
				restarted = restarted || isRestarted(e)
			}
			if restarted != tt.restart || (st.Stats().Restarts == 1) != tt.restart {
				t.Fatalf("restarted %v (stats %d), want %v", restarted, st.Stats().Restarts, tt.restart)
			}
		})
	}
}

// immediate is an Options.After whose timers have already fired.
func immediate(time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	c <- time.Time{}
	return c
}

// fakeTimers is an Options.After that hands each timer to the test.
type fakeTimer struct {
	d    time.Duration
	fire chan time.Time
}

type fakeTimers chan fakeTimer

func (f fakeTimers) After(d time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	f <- fakeTimer{d, c}
	return c
}

func (f fakeTimers) next(t *testing.T) fakeTimer {
	t.Helper()
	select {
	case ft := <-f:
		return ft
	case <-time.After(20 * time.Second):
		t.Fatal("no backoff timer (hang)")
		return fakeTimer{}
	}
}

// TestRestartBackoff: only a crash loop backs off. A first crash, a crash
// of a handler that has handled an event (a rare poison event) and a
// crash after a quiet period restart at once; each further crash of a
// restarted handler that handled nothing within the period waits
// backoff, doubled each time up to maxBackoff, jittered into [d/2, d),
// on the manager's clock. backoff off never waits. (That events queued
// during a backoff reach the new handler is shown by
// TestHeldRestartLeavesSupervisorResponsive.) The clock, the timers and the random source
// are fakes, so the test decides everything.
func TestRestartBackoff(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name    string
		backoff time.Duration
		// steps: "crash" (want: the backoff's base d, 0 for none), "ok"
		// (an event handled), "quiet" (the period passes).
		steps []string
		want  []time.Duration // per crash
	}{
		{"crash loop", 100 * ms,
			[]string{"crash", "crash", "crash", "crash", "crash"},
			[]time.Duration{0, 100 * ms, 200 * ms, 300 * ms, 300 * ms}},
		{"poison between successes", 100 * ms,
			[]string{"crash", "ok", "crash", "ok", "crash", "ok", "crash"},
			[]time.Duration{0, 0, 0, 0}},
		{"loop ends with a success", 100 * ms,
			[]string{"crash", "crash", "crash", "ok", "crash", "crash"},
			[]time.Duration{0, 100 * ms, 200 * ms, 0, 100 * ms}},
		{"quiet period", 100 * ms,
			[]string{"crash", "crash", "quiet", "crash", "crash"},
			[]time.Duration{0, 100 * ms, 0, 100 * ms}},
		{"off", stage.NoBackoff,
			[]string{"crash", "crash", "crash", "crash"},
			[]time.Duration{0, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Unix(1000, 0)}
			timers := make(fakeTimers, 1)
			m := stage.NewManager(stage.Options{Now: clock.Now, After: timers.After, Rand: rand.New(rand.NewPCG(1, 2))})
			var handled atomic.Int32
			st, err := m.CreateSupervised("S", func() stage.Handler {
				return stage.HandlerFunc(func(b []sink.Event) error {
					if b[0] == "crash" {
						panic("crash")
					}
					handled.Add(1)
					return nil
				})
			}, stage.StageConfig{Batching: stage.BatchingConfig{Max: 1}, Supervisor: &stage.SupervisorConfig{
				MaxRestarts: 100, Period: time.Minute, Backoff: tc.backoff, MaxBackoff: 300 * ms,
			}})
			if err != nil {
				t.Fatal(err)
			}
			mon := newChanSink(100)
			_, _ = m.Monitor("S", mon)
			started(t, m)
			crashes, oks := 0, 0
			for _, step := range tc.steps {
				switch step {
				case "quiet":
					clock.Advance(2 * time.Minute)
					continue
				case "ok":
					_ = st.Sink().Enqueue("ok")
					oks++
					// The success must be recorded (its batch finished)
					// before the next crash.
					for st.Stats().Events < uint64(oks+crashes) {
						time.Sleep(time.Millisecond)
					}
					continue
				}
				want := tc.want[crashes]
				crashes++
				_ = st.Sink().Enqueue("crash")
				if want == 0 {
					mon.until(t, isRestarted)
					select {
					case ft := <-timers:
						t.Fatalf("crash %d: backoff %v, want none", crashes, ft.d)
					default:
					}
					continue
				}
				ft := timers.next(t)
				if ft.d < want/2 || ft.d >= want {
					t.Fatalf("crash %d waits %v, want [%v, %v)", crashes, ft.d, want/2, want)
				}
				ft.fire <- time.Time{}
				mon.until(t, isRestarted)
			}
			shutdown(t, m)
			if int(handled.Load()) != oks || st.Stats().Restarts != uint64(crashes) {
				t.Fatalf("handled %d, restarts %d; want %d, %d", handled.Load(), st.Stats().Restarts, oks, crashes)
			}
		})
	}
}

// TestGiveUpFailsStages: a root supervisor that gives up (default
// onGiveUp: fail) fails its own stages only: they reject events with
// sink.ErrClosed and their monitors hear ReasonGaveUp, while the manager
// and its other stages go on; Shutdown is clean.
func TestGiveUpFailsStages(t *testing.T) {
	m := stage.NewManager(stage.Options{After: immediate})
	crashing := func() stage.Handler {
		return stage.HandlerFunc(func([]sink.Event) error { panic("crash") })
	}
	var sInits, xInits atomic.Int32
	if _, err := m.CreateStage("A", crashing(), stage.StageConfig{Factory: crashing}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateStage("B", &failing{inits: &sInits}, stage.StageConfig{
		Factory: func() stage.Handler { return &failing{inits: &sInits} },
	}); err != nil {
		t.Fatal(err)
	}
	if err := m.Supervise("Root", stage.SupervisorConfig{MaxRestarts: 1, Period: time.Hour, Children: []string{"A", "B"}}); err != nil {
		t.Fatal(err)
	}
	other, err := m.CreateSupervised("Other", func() stage.Handler { return &failing{inits: &xInits} }, stage.StageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	monA, monB := newChanSink(100), newChanSink(100)
	_, _ = m.Monitor("A", monA)
	_, _ = m.Monitor("B", monB)
	started(t, m)
	a, _ := m.Stage("A")
	b, _ := m.Stage("B")
	_ = a.Sink().Enqueue(1)
	monA.until(t, isRestarted)
	_ = a.Sink().Enqueue(2)
	for _, mon := range []*chanSink{monA, monB} {
		events := mon.until(t, isTerminated)
		term := events[len(events)-1].(stage.StageTerminated)
		if term.Reason != stage.ReasonGaveUp || !errors.Is(term.Err, stage.ErrGaveUp) {
			t.Fatalf("termination %+v", term)
		}
	}
	for _, s := range []*stage.Stage{a, b} {
		if err := s.Sink().Enqueue(3); !errors.Is(err, sink.ErrClosed) {
			t.Fatalf("%s: enqueue after give-up: %v", s.Name(), err)
		}
	}
	if err := other.Sink().Enqueue("fine"); err != nil { // errBad: not a crash
		t.Fatalf("other stage: %v", err)
	}
	select {
	case <-m.Done():
		t.Fatalf("manager stopped: %v", m.Err())
	default:
	}
	shutdown(t, m)
	if err := m.Err(); err != nil {
		t.Fatalf("Err = %v", err)
	}
	if sInits.Load() != 1 || other.Stats().Restarts != 0 {
		t.Fatalf("B made %d handlers (one-for-one: 1), Other restarted %d times", sInits.Load(), other.Stats().Restarts)
	}
}

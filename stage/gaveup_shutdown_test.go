package stage_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// doneWatcher is a slog.Handler that, for the record of the failed
// shutdown after a supervisor gave up, notes whether the manager's Done
// was already closed.
type doneWatcher struct {
	m                  atomic.Pointer[stage.Manager]
	logged, doneBefore atomic.Bool
}

func (w *doneWatcher) Enabled(context.Context, slog.Level) bool { return true }
func (w *doneWatcher) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *doneWatcher) WithGroup(string) slog.Handler            { return w }
func (w *doneWatcher) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "shutdown after supervisor gave up" {
		return nil
	}
	select {
	case <-w.m.Load().Done():
		w.doneBefore.Store(true)
	default:
	}
	w.logged.Store(true)
	return nil
}

// badDestroy fails its Destroy, so that a shutdown returns an error.
type badDestroy struct{ stage.HandlerFunc }

var errDestroy = errors.New("destroy failed")

func (badDestroy) Destroy() error { return errDestroy }

// firedTimers is an Options.After whose timers have fired already.
func firedTimers(time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	c <- time.Time{}
	return c
}

// TestGiveUpShutdownOwned: the shutdown a root supervisor starts when it
// gives up (onGiveUp stop) is owned by Done: its failure is logged before
// Done is closed, never after, and Err carries both the give-up and the
// shutdown's error.
func TestGiveUpShutdownOwned(t *testing.T) {
	w := &doneWatcher{}
	m := stage.NewManager(stage.Options{Logger: slog.New(w), After: firedTimers})
	w.m.Store(m)
	st, err := m.CreateSupervised("S", func() stage.Handler {
		return stage.HandlerFunc(func([]sink.Event) error { panic("crash") })
	}, stage.StageConfig{
		Supervisor: &stage.SupervisorConfig{MaxRestarts: 1, Period: time.Hour, OnGiveUp: stage.GiveUpStop},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateStage("D", badDestroy{}, stage.StageConfig{}); err != nil {
		t.Fatal(err)
	}
	mon := newChanSink(100)
	_, _ = m.Monitor("S", mon)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = st.Sink().Enqueue("crash")
	mon.until(t, isRestarted)
	_ = st.Sink().Enqueue("crash") // the second within the hour: give up
	waitDone(t, m)
	if !w.logged.Load() {
		t.Fatal("Done closed before the shutdown's failure was logged")
	}
	if w.doneBefore.Load() {
		t.Fatal("Done closed while the shutdown after the give-up was still running")
	}
	if err := m.Err(); !errors.Is(err, stage.ErrGaveUp) || !errors.Is(err, errDestroy) {
		t.Fatalf("Err = %v, want ErrGaveUp and the Destroy error", err)
	}
}

// TestGiveUpShutdownBound: the shutdown after a root supervisor gave up
// is bounded by the configuration's global.shutdown (ShutdownBound): a
// stage whose handler never returns does not keep the manager from
// stopping, and Err says which stage did not stop.
func TestGiveUpShutdownBound(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	r := stage.NewRegistry()
	r.Register("test.Crash", func() stage.Handler {
		return stage.HandlerFunc(func([]sink.Event) error { panic("crash") })
	})
	r.Register("test.Hang", func() stage.Handler {
		return stage.HandlerFunc(func([]sink.Event) error {
			entered <- struct{}{}
			<-release
			return nil
		})
	})
	cfg, err := stage.ParseConfig([]byte(`
global: {shutdown: 100ms}
stages:
  S: {handler: test.Crash, supervisor: {maxRestarts: 1, period: 1h, onGiveUp: stop}}
  H: {handler: test.Hang}
`), "bound.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// NewFromConfig, unlike Load and Parse, does not bound Shutdown
	// itself: only the give-up's own bound applies.
	m, err := stage.NewFromConfig(cfg, r, stage.Options{After: firedTimers})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.ShutdownBound(); got != 100*time.Millisecond {
		t.Fatalf("ShutdownBound %v", got)
	}
	mon := newChanSink(100)
	_, _ = m.Monitor("S", mon)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h, _ := m.Stage("H")
	s, _ := m.Stage("S")
	_ = h.Sink().Enqueue("hang")
	<-entered
	_ = s.Sink().Enqueue("crash")
	mon.until(t, isRestarted)
	_ = s.Sink().Enqueue("crash")
	waitDone(t, m)
	err = m.Err()
	if !errors.Is(err, stage.ErrGaveUp) || !errors.Is(err, stage.ErrNotStopped) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err = %v, want ErrGaveUp, ErrNotStopped and the deadline", err)
	}
	// The stages that had not stopped when the bound passed: H, and
	// maybe S whose goroutines were on their way out.
	_, stuck, _ := strings.Cut(err.Error(), "stages did not stop: ")
	stuck, _, _ = strings.Cut(stuck, " (")
	if !slices.Contains(strings.Split(stuck, ", "), "H") {
		t.Fatalf("Err = %v does not name stage H", err)
	}
}

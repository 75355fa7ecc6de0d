package stage_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// blocker blocks in HandleEvents until released, and records whether its
// Destroy ran while a HandleEvents was still running.
type blocker struct {
	release    chan struct{}
	entered    chan struct{}
	running    atomic.Int32
	destroys   atomic.Int32
	destroyBad atomic.Bool
}

func newBlocker() *blocker {
	return &blocker{release: make(chan struct{}), entered: make(chan struct{}, 100)}
}

func (b *blocker) HandleEvents([]sink.Event) error {
	b.running.Add(1)
	defer b.running.Add(-1)
	b.entered <- struct{}{}
	<-b.release
	return nil
}

func (b *blocker) Destroy() error {
	b.destroys.Add(1)
	if b.running.Load() != 0 {
		b.destroyBad.Store(true)
	}
	return nil
}

// TestShutdownLeavesStuckStagesUndestroyed: Destroy runs "after the last
// batch"; a stage whose handler is still inside HandleEvents when the
// shutdown deadline passes is reported, not destroyed under its feet. The
// other stages are destroyed as usual.
func TestShutdownLeavesStuckStagesUndestroyed(t *testing.T) {
	for _, tm := range []string{"pool", "shared"} {
		t.Run(tm, func(t *testing.T) {
			m := stage.NewManager(stage.Options{ThreadManager: stage.ThreadManagerConfig{Type: tm, Threads: 2}})
			b := newBlocker()
			st, err := m.CreateStage("Stuck", b, stage.StageConfig{Batching: stage.BatchingConfig{Max: 1}})
			if err != nil {
				t.Fatal(err)
			}
			ok := &lifecycle{}
			if _, err := m.CreateStage("Fine", ok, stage.StageConfig{}); err != nil {
				t.Fatal(err)
			}
			if err := m.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer close(b.release)
			_ = st.Sink().Enqueue(1)
			_ = st.Sink().Enqueue(2)
			<-b.entered
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // the deadline has passed
			done := make(chan error, 1)
			go func() { done <- m.Shutdown(ctx) }()
			var serr error
			select {
			case serr = <-done:
			case <-time.After(30 * time.Second): // hang guard only
				t.Fatal("Shutdown did not return after its context ended while a handler was stuck")
			}
			if !errors.Is(serr, stage.ErrNotStopped) || !errors.Is(serr, context.Canceled) {
				t.Fatalf("Shutdown = %v", serr)
			}
			if b.destroyBad.Load() || b.destroys.Load() != 0 {
				t.Fatalf("Destroy ran %d times on a stage whose handler was still running", b.destroys.Load())
			}
			if ok.destroys.Load() != 1 {
				t.Fatalf("the stage that stopped was destroyed %d times, want 1", ok.destroys.Load())
			}
			select {
			case <-m.Done():
			default:
				t.Fatal("Done not closed after Shutdown returned")
			}
		})
	}
}

// TestNoIntakeAfterStopWithoutRun: a manager shut down before Start, or
// whose Start failed, refuses events instead of queueing them for stages
// that will never run.
func TestNoIntakeAfterStopWithoutRun(t *testing.T) {
	tests := []struct {
		name string
		stop func(m *stage.Manager) error
	}{
		{"shutdown before start", func(m *stage.Manager) error { return m.Shutdown(context.Background()) }},
		{"failed start", func(m *stage.Manager) error {
			if _, err := m.CreateStage("Bad", &failingInit{}, stage.StageConfig{}); err != nil {
				return err
			}
			if err := m.Start(context.Background()); !errors.Is(err, stage.ErrInit) {
				return fmt.Errorf("Start = %v, want ErrInit", err)
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := stage.NewManager(stage.Options{})
			st, err := m.CreateStage("S", &lifecycle{}, stage.StageConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.stop(m); err != nil {
				t.Fatal(err)
			}
			if err := st.Sink().Enqueue(1); !errors.Is(err, sink.ErrClosed) {
				t.Fatalf("Enqueue after the manager stopped = %v, want ErrClosed", err)
			}
			if _, err := m.CreateStage("Late", &lifecycle{}, stage.StageConfig{}); !errors.Is(err, stage.ErrManagerClosed) {
				t.Fatalf("CreateStage after the manager stopped = %v", err)
			}
		})
	}
}

// TestShutdownStartedReachesStageSinks: ShutdownStarted is raised before
// intake stops, so a stage subscribed through its own Sink gets it.
func TestShutdownStartedReachesStageSinks(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	c := &collector{}
	st, err := m.CreateStage("Listener", c, stage.StageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m.Subscribe(stage.SignalShutdownStarted, st.Sink())
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	shutdown(t, m)
	got := c.snapshot()
	if len(got) != 1 {
		t.Fatalf("listener got %v, want one ShutdownStarted", got)
	}
	if _, ok := got[0].(stage.ShutdownStarted); !ok {
		t.Fatalf("listener got %T, want ShutdownStarted", got[0])
	}
}

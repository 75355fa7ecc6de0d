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

// TestStatsWhileCreatingStages reads every stage's Stats (as the profiler
// does) while stages are created on a running manager: a stage must be
// complete before others can see it. Run with -race.
func TestStatsWhileCreatingStages(t *testing.T) {
	for _, tm := range []string{"pool", "shared"} {
		t.Run(tm, func(t *testing.T) {
			m := stage.NewManager(stage.Options{ThreadManager: stage.ThreadManagerConfig{Type: tm, Threads: 2}})
			started(t, m)
			const n = 20
			found := make(chan struct{})
			go func() {
				defer close(found)
				seen := 0
				for seen < n {
					seen = 0
					for _, st := range m.Stages() {
						_ = st.Stats()
						_ = st.Pool()
						_ = st.Sink().Enqueue("x")
						seen++
					}
				}
			}()
			for i := 0; i < n; i++ {
				if _, err := m.CreateStage(fmt.Sprint("S", i), &collector{}, stage.StageConfig{}); err != nil {
					t.Fatal(err)
				}
			}
			<-found
		})
	}
}

// initGate is a handler whose Init enqueues an event on its own stage and
// then waits (bounded) to see whether the event gets handled before Init
// has returned.
type initGate struct {
	initDone   atomic.Bool
	early      atomic.Bool
	handled    chan struct{}
	handleOnce sync.Once
}

func (g *initGate) Init(c *stage.Context) error {
	if err := c.Stage().Sink().Enqueue("tick"); err != nil {
		return err
	}
	select {
	case <-g.handled: // the runtime ran the handler before Init returned
	case <-time.After(200 * time.Millisecond): // detection window only
	}
	g.initDone.Store(true)
	return nil
}

func (g *initGate) HandleEvents([]sink.Event) error {
	if !g.initDone.Load() {
		g.early.Store(true)
	}
	g.handleOnce.Do(func() { close(g.handled) })
	return nil
}

// TestNoBatchBeforeInit: a stage created on a running manager gets no batch
// before its handler's Init has returned, whatever the thread manager.
func TestNoBatchBeforeInit(t *testing.T) {
	for _, tm := range []string{"pool", "shared"} {
		t.Run(tm, func(t *testing.T) {
			m := stage.NewManager(stage.Options{ThreadManager: stage.ThreadManagerConfig{Type: tm, Threads: 2}})
			started(t, m)
			g := &initGate{handled: make(chan struct{})}
			if _, err := m.CreateStage("Gate", g, stage.StageConfig{}); err != nil {
				t.Fatal(err)
			}
			<-g.handled
			if g.early.Load() {
				t.Fatal("HandleEvents ran before Init returned")
			}
		})
	}
}

// slowInit blocks in Init until released.
type slowInit struct {
	lifecycle
	entered  chan struct{}
	release  chan struct{}
	initDone atomic.Bool
	early    atomic.Bool // Destroy ran before Init returned
}

func (s *slowInit) Init(c *stage.Context) error {
	close(s.entered)
	<-s.release
	s.initDone.Store(true)
	return s.lifecycle.Init(c)
}

func (s *slowInit) Destroy() error {
	if !s.initDone.Load() {
		s.early.Store(true)
	}
	return s.lifecycle.Destroy()
}

// TestShutdownWaitsForStageBeingCreated: a Shutdown that begins while a
// stage is being created on the running manager waits for the creation to
// finish, then drains and destroys that stage like the others: its handler
// is not destroyed before its Init returned, and no goroutine of it starts
// after Shutdown returned.
func TestShutdownWaitsForStageBeingCreated(t *testing.T) {
	for _, tm := range []string{"pool", "shared"} {
		t.Run(tm, func(t *testing.T) {
			m := stage.NewManager(stage.Options{ThreadManager: stage.ThreadManagerConfig{Type: tm, Threads: 2}})
			if err := m.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			h := &slowInit{entered: make(chan struct{}), release: make(chan struct{})}
			created := make(chan error, 1)
			go func() {
				_, err := m.CreateStage("Late", h, stage.StageConfig{})
				created <- err
			}()
			<-h.entered
			stopped := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				stopped <- m.Shutdown(ctx)
			}()
			var serr error
			early := false
			select {
			case serr = <-stopped:
				early = true
				t.Errorf("Shutdown returned (%v) while a stage's Init was still running", serr)
			case <-time.After(100 * time.Millisecond): // detection window only
			}
			close(h.release)
			if err := <-created; err != nil && !errors.Is(err, stage.ErrManagerClosed) {
				t.Fatalf("CreateStage: %v", err)
			}
			if !early {
				serr = <-stopped
			}
			if serr != nil {
				t.Fatalf("Shutdown: %v", serr)
			}
			if h.early.Load() {
				t.Fatal("Destroy ran before Init returned")
			}
			if got := h.destroys.Load(); got != h.inits.Load() {
				t.Fatalf("Init ran %d times, Destroy %d times", h.inits.Load(), got)
			}
		})
	}
}

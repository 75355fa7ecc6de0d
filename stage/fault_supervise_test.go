package stage_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// hanger is a supervised handler: "hang" blocks until release is closed,
// "boom" fails, anything else is recorded with the handler's number.
type hanger struct {
	n       int
	entered chan struct{} // gets a value when a "hang" batch starts
	release chan struct{}
	mu      *sync.Mutex
	handled *[]string
}

func (h *hanger) HandleEvents(b []sink.Event) error {
	for _, e := range b {
		switch e {
		case "hang":
			h.entered <- struct{}{}
			<-h.release
		case "boom":
			return errors.New("boom")
		default:
			h.mu.Lock()
			*h.handled = append(*h.handled, fmt.Sprintf("%v@%d", e, h.n))
			h.mu.Unlock()
		}
	}
	return nil
}

// hangerFactory returns a factory numbering its handlers from 1 and what
// they handled.
func hangerFactory(entered, release chan struct{}) (stage.Factory, func() []string) {
	var mu sync.Mutex
	var handled []string
	n := 0
	return func() stage.Handler {
			mu.Lock()
			defer mu.Unlock()
			n++
			return &hanger{n: n, entered: entered, release: release, mu: &mu, handled: &handled}
		}, func() []string {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(handled)
		}
}

func isRestarted(e sink.Event) bool { _, ok := e.(stage.StageRestarted); return ok }

// TestHungRestartDoesNotBlockOtherTrees: S1 fails while another of its
// batches hangs, so its restart waits for that batch; an unrelated
// supervised stage S2 that fails meanwhile is restarted at once and goes
// on, and S1 restarts when its batch returns.
func TestHungRestartDoesNotBlockOtherTrees(t *testing.T) {
	for _, tm := range []string{"pool", "shared"} {
		t.Run(tm, func(t *testing.T) {
			m := stage.NewManager(stage.Options{ThreadManager: stage.ThreadManagerConfig{Type: tm, Threads: 3}})
			entered, release := make(chan struct{}, 1), make(chan struct{})
			f1, handled1 := hangerFactory(entered, release)
			f2, handled2 := hangerFactory(entered, release)
			cfg := stage.StageConfig{
				Batching:   stage.BatchingConfig{Max: 1},
				ThreadPool: stage.ThreadPoolConfig{Min: 2, Max: 2},
				Supervisor: &stage.SupervisorConfig{RestartOn: stage.RestartOnError},
			}
			s1, err := m.CreateSupervised("S1", f1, cfg)
			if err != nil {
				t.Fatal(err)
			}
			s2, err := m.CreateSupervised("S2", f2, cfg)
			if err != nil {
				t.Fatal(err)
			}
			mon1, mon2 := newChanSink(100), newChanSink(100)
			_, _ = m.Monitor("S1", mon1)
			_, _ = m.Monitor("S2", mon2)
			started(t, m)
			released := false
			defer func() {
				if !released {
					close(release) // let the shutdown of a failed test end
				}
			}()

			_ = s1.Sink().Enqueue("hang")
			<-entered
			_ = s1.Sink().Enqueue("boom") // S1's restart now waits for "hang"
			if f, ok := mon1.next(t).(stage.StageFailed); !ok || f.Events[0] != "boom" {
				t.Fatalf("S1: %#v", f)
			}
			_ = s1.Sink().Enqueue("queued")

			_ = s2.Sink().Enqueue("boom")
			mon2.until(t, isRestarted) // hangs without independent supervision
			_ = s2.Sink().Enqueue("after")

			close(release)
			released = true
			mon1.until(t, isRestarted)
			shutdown(t, m)
			if got := handled2(); !slices.Equal(got, []string{"after@2"}) {
				t.Fatalf("S2 handled %v", got)
			}
			if got := handled1(); !slices.Equal(got, []string{"queued@2"}) {
				t.Fatalf("S1 handled %v", got)
			}
			if s1.Stats().Restarts != 1 || s2.Stats().Restarts != 1 {
				t.Fatalf("restarts S1 %d S2 %d", s1.Stats().Restarts, s2.Stats().Restarts)
			}
		})
	}
}

// TestSuperviseAfterStart: supervision trees are fixed once the manager
// runs (failures are dealt with per tree), so a group cannot be formed
// then; a stage with its own supervisor, a new tree, still can.
func TestSuperviseAfterStart(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	noop := stage.HandlerFunc(func([]sink.Event) error { return nil })
	f := func() stage.Handler { return noop }
	if _, err := m.CreateStage("A", noop, stage.StageConfig{Factory: f}); err != nil {
		t.Fatal(err)
	}
	started(t, m)
	if err := m.Supervise("G", stage.SupervisorConfig{Children: []string{"A"}}); !errors.Is(err, stage.ErrSupervisor) {
		t.Fatalf("Supervise after Start: %v, want ErrSupervisor", err)
	}
	if _, err := m.CreateSupervised("B", f, stage.StageConfig{}); err != nil {
		t.Fatal(err)
	}
	if got := m.Supervisors(); !slices.Equal(got, []string{"B"}) {
		t.Fatalf("supervisors %v", got)
	}
}

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

// hangerPair is two supervised stages of hangers, S1 and S2 (each its
// own tree, one event a batch, two threads), that share one entered and
// release pair and are each watched by a monitor.
type hangerPair struct {
	cfg                stage.StageConfig
	entered, release   chan struct{}
	released           bool
	s1, s2             *stage.Stage
	handled1, handled2 func() []string
	mon1, mon2         *chanSink
}

// startHangerPair creates S1 and S2 on m and starts m. Unless the test
// let the hangers go, release is closed when the test ends, before m
// shuts down, so that the shutdown of a failed test ends.
func startHangerPair(t *testing.T, m *stage.Manager) *hangerPair {
	t.Helper()
	p := &hangerPair{
		cfg: stage.StageConfig{
			Batching:   stage.BatchingConfig{Max: 1},
			ThreadPool: stage.ThreadPoolConfig{Min: 2, Max: 2},
			Supervisor: &stage.SupervisorConfig{RestartOn: stage.RestartOnError},
		},
		entered: make(chan struct{}, 1),
		release: make(chan struct{}),
		mon1:    newChanSink(100),
		mon2:    newChanSink(100),
	}
	f1, handled1 := hangerFactory(p.entered, p.release)
	f2, handled2 := hangerFactory(p.entered, p.release)
	p.handled1, p.handled2 = handled1, handled2
	var err error
	if p.s1, err = m.CreateSupervised("S1", f1, p.cfg); err != nil {
		t.Fatal(err)
	}
	if p.s2, err = m.CreateSupervised("S2", f2, p.cfg); err != nil {
		t.Fatal(err)
	}
	_, _ = m.Monitor("S1", p.mon1)
	_, _ = m.Monitor("S2", p.mon2)
	started(t, m)
	t.Cleanup(func() {
		if !p.released {
			close(p.release)
		}
	})
	return p
}

// letGo returns every hanging batch.
func (p *hangerPair) letGo() {
	close(p.release)
	p.released = true
}

// TestHungRestartDoesNotBlockOtherTrees: S1 fails while another of its
// batches hangs, so its restart waits for that batch; an unrelated
// supervised stage S2 that fails meanwhile is restarted at once and goes
// on, and S1 restarts when its batch returns.
func TestHungRestartDoesNotBlockOtherTrees(t *testing.T) {
	for _, tm := range []string{"pool", "shared"} {
		t.Run(tm, func(t *testing.T) {
			m := stage.NewManager(stage.Options{ThreadManager: stage.ThreadManagerConfig{Type: tm, Threads: 3}})
			p := startHangerPair(t, m)
			s1, s2, mon1, mon2 := p.s1, p.s2, p.mon1, p.mon2

			_ = s1.Sink().Enqueue("hang")
			<-p.entered
			_ = s1.Sink().Enqueue("boom") // S1's restart now waits for "hang"
			if f, ok := mon1.next(t).(stage.StageFailed); !ok || f.Events[0] != "boom" {
				t.Fatalf("S1: %#v", f)
			}
			_ = s1.Sink().Enqueue("queued")

			_ = s2.Sink().Enqueue("boom")
			mon2.until(t, isRestarted) // hangs without independent supervision
			_ = s2.Sink().Enqueue("after")

			p.letGo()
			mon1.until(t, isRestarted)
			shutdown(t, m)
			if got := p.handled2(); !slices.Equal(got, []string{"after@2"}) {
				t.Fatalf("S2 handled %v", got)
			}
			if got := p.handled1(); !slices.Equal(got, []string{"queued@2"}) {
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

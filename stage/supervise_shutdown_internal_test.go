package stage

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/logbuf"
	"github.com/sandstorm-go/sandstorm/sink"
)

// hungRestart is a supervised stage "S" whose handler crashed and whose
// restart now hangs in the new handler's Init (block "init") or the old
// one's Destroy ("destroy"), with counts of the handlers' Inits and
// Destroys.
type hungRestart struct {
	st              *Stage
	inits, destroys *atomic.Int32
	release         func() // lets the hung call return; later calls do nothing
}

// startHungRestart creates and starts the stage on m, crashes it and
// waits until its restart hangs. The hung call is released at the end of
// the test if the test has not released it.
func startHungRestart(t *testing.T, m *Manager, block string) *hungRestart {
	t.Helper()
	entered, release := make(chan string, 1), make(chan struct{})
	var inits, destroys, made atomic.Int32
	factory := func() Handler {
		h := &lifecycle{entered: entered, release: release, inits: &inits, destroys: &destroys}
		n := made.Add(1)
		if (block == "init" && n == 2) || (block == "destroy" && n == 1) {
			h.block = block
		}
		return h
	}
	st, err := m.CreateSupervised("S", factory, StageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	h := &hungRestart{st: st, inits: &inits, destroys: &destroys, release: func() { once.Do(func() { close(release) }) }}
	t.Cleanup(h.release) // let a failed test's goroutines end
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := st.Sink().Enqueue("crash"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered: // the restart is now stuck
	case <-time.After(20 * time.Second):
		t.Fatal("the restart never reached the blocking call")
	}
	return h
}

// lifecycle is a handler that panics on "crash" and whose Init or Destroy
// (block) waits for release; it counts its Inits and Destroys in the
// shared counters.
type lifecycle struct {
	block    string // "init", "destroy" or ""
	entered  chan<- string
	release  <-chan struct{}
	inits    *atomic.Int32
	destroys *atomic.Int32
}

func (h *lifecycle) Init(*Context) error {
	if h.block == "init" {
		h.entered <- "init"
		<-h.release
	}
	h.inits.Add(1)
	return nil
}

func (h *lifecycle) Destroy() error {
	if h.block == "destroy" {
		h.entered <- "destroy"
		<-h.release
	}
	h.destroys.Add(1)
	return nil
}

func (h *lifecycle) HandleEvents(b []sink.Event) error {
	for _, e := range b {
		if e == "crash" {
			panic("crash")
		}
	}
	return nil
}

// createCounted creates the supervised stage S on m, its handlers
// (lifecycle, never blocking) counting their Destroy calls in destroys.
func createCounted(t *testing.T, m *Manager) (destroys *atomic.Int32) {
	t.Helper()
	var inits atomic.Int32
	destroys = &atomic.Int32{}
	if _, err := m.CreateSupervised("S", func() Handler {
		return &lifecycle{inits: &inits, destroys: destroys}
	}, StageConfig{}); err != nil {
		t.Fatal(err)
	}
	return destroys
}

// newHungRestart makes a manager logging into the buffer it returns, with
// restart backoffs that take no time, and starts the stage of
// startHungRestart on it.
func newHungRestart(t *testing.T, block string) (*Manager, *hungRestart, *logbuf.Buffer) {
	t.Helper()
	logs := &logbuf.Buffer{}
	m := NewManager(Options{After: firedAfter, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	return m, startHungRestart(t, m, block), logs
}

// callAbandoningRestart calls call, named what, with a context that ends
// after d while a restart hangs. It checks that call returns, with an
// error that wraps ErrNotStopped and the context's error and names each
// of names.
func callAbandoningRestart(t *testing.T, what string, d time.Duration, call func(context.Context) error, names ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- call(ctx) }()
	var err error
	select {
	case err = <-res:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s ignored its context's end while a restart was stuck", what)
	}
	t.Logf("%s: %v", what, err)
	if !errors.Is(err, ErrNotStopped) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: %v; want ErrNotStopped and the deadline", what, err)
	}
	for _, want := range names {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%s error %q does not name %s", what, err, want)
		}
	}
}

// firedAfter is an Options.After whose timers have fired already: restart
// backoffs take no time.
func firedAfter(time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	c <- time.Time{}
	return c
}

// TestShutdownAbandonsHungRestart: a supervised stage's handler crashes
// and its restart hangs, in the new handler's Init or in the old one's
// Destroy. Shutdown returns when its context ends, with an error that
// wraps ErrNotStopped and the context's error and names the stage and the
// step the restart is stuck in, and logs it. Once the hung call returns,
// the abandoned worker destroys the handler it initialized (every handler
// initialized is destroyed exactly once) and the supervisor goroutine and
// its workers end: nothing is left running.
func TestShutdownAbandonsHungRestart(t *testing.T) {
	for _, tc := range []struct {
		block string // which call of the restart hangs
		step  string // what the error names
	}{
		{"init", "in the new handler's Init"},
		{"destroy", "in the old handler's Destroy"},
	} {
		t.Run(tc.block, func(t *testing.T) {
			m, h, logs := newHungRestart(t, tc.block)
			inits, destroys := h.inits, h.destroys

			callAbandoningRestart(t, "Shutdown", 300*time.Millisecond, m.Shutdown, `"S"`, tc.step)
			if !strings.Contains(logs.String(), "shutdown abandoned a supervisor restart") {
				t.Fatalf("abandoned restart not logged:\n%s", logs.String())
			}
			select {
			case <-m.Done():
			default:
				t.Fatal("Done not closed after Shutdown returned")
			}

			h.release()
			select {
			case <-m.sup.done:
			case <-time.After(20 * time.Second):
				t.Fatal("supervisor goroutine still running after the hung call returned")
			}
			m.sup.wg.Wait() // its workers
			if i, d := inits.Load(), destroys.Load(); i != 2 || d != 2 {
				t.Fatalf("%d handlers initialized, %d destroyed; want 2 and 2", i, d)
			}
			if !strings.Contains(logs.String(), "abandoned restart finished") {
				t.Fatalf("end of the abandoned restart not logged:\n%s", logs.String())
			}
		})
	}
}

// TestShutdownPastDeadlineWaitsForIdleSupervisor: a Shutdown whose
// context has ended (a handler elsewhere never returns) still waits for
// the supervisor goroutine when no restart holds a stage: nothing of
// supervision outlives Shutdown, and its error blames only the stage
// that did not stop.
func TestShutdownPastDeadlineWaitsForIdleSupervisor(t *testing.T) {
	m := NewManager(Options{})
	destroys := createCounted(t, m)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	h, err := m.CreateStage("H", HandlerFunc(func([]sink.Event) error {
		entered <- struct{}{}
		<-release
		return nil
	}), StageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = h.Sink().Enqueue("hang")
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = m.Shutdown(ctx)
	if !errors.Is(err, ErrNotStopped) || strings.Contains(err.Error(), "supervisor") {
		t.Fatalf("Shutdown: %v; want ErrNotStopped for H only", err)
	}
	select {
	case <-m.sup.done:
	default:
		t.Fatal("supervisor goroutine outlived Shutdown")
	}
	if d := destroys.Load(); d != 1 {
		t.Fatalf("S destroyed %d times, want 1", d)
	}
}

package stage_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

type upperReq = stage.Request[string, string]

// startOne starts a manager with one stage running h and returns the
// stage; the manager is shut down when the test ends.
func startOne(t *testing.T, h stage.Handler, cfg stage.StageConfig) (*stage.Manager, *stage.Stage) {
	t.Helper()
	m := stage.NewManager(stage.Options{})
	st, err := m.CreateStage("S", h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return m, st
}

func TestCallOutcomes(t *testing.T) {
	h := stage.HandlerFunc(func(batch []sink.Event) error {
		for _, e := range batch {
			r := e.(*upperReq)
			switch r.Value {
			case "fail":
				r.Fail(errors.New("no such order"))
			case "panic":
				panic("boom")
			case "error":
				return errors.New("batch error")
			default:
				r.Reply(strings.ToUpper(r.Value))
			}
		}
		return nil
	})
	_, st := startOne(t, h, stage.StageConfig{Batching: stage.BatchingConfig{Max: 1}})
	for _, tc := range []struct {
		in, want   string
		failed     bool
		stageNamed bool
	}{
		{in: "abc", want: "ABC"},
		{in: "fail", failed: true},
		{in: "panic", failed: true, stageNamed: true},
		{in: "error", failed: true, stageNamed: true},
	} {
		got, err := stage.Call[string, string](context.Background(), st.Sink(), tc.in)
		if !tc.failed {
			if err != nil || got != tc.want {
				t.Errorf("Call(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
			continue
		}
		var ce *stage.CallError
		if !errors.Is(err, stage.ErrCallFailed) || !errors.As(err, &ce) {
			t.Errorf("Call(%q) error %v: want a CallError wrapping ErrCallFailed", tc.in, err)
			continue
		}
		if tc.stageNamed != (ce.Stage == "S") {
			t.Errorf("Call(%q): CallError.Stage = %q", tc.in, ce.Stage)
		}
		if errors.Is(err, sink.ErrRejected) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Call(%q): failure %v also reads as rejection or timeout", tc.in, err)
		}
	}
}

func TestCallRejected(t *testing.T) {
	_, st := startOne(t, stage.HandlerFunc(func([]sink.Event) error { return nil }),
		stage.StageConfig{Predicate: sink.PredicateFunc(func(sink.Event) bool { return false })})
	_, err := stage.Call[string, string](context.Background(), st.Sink(), "x")
	if !errors.Is(err, sink.ErrRejected) || errors.Is(err, stage.ErrCallFailed) {
		t.Fatalf("err = %v, want a rejection only", err)
	}
}

// TestCallTimeoutAndExpiry: a caller whose deadline passes gets
// DeadlineExceeded; the requests queued behind a blocked handler whose
// callers have gone are dropped unhandled and counted.
func TestCallTimeoutAndExpiry(t *testing.T) {
	block := make(chan struct{})
	entered := make(chan struct{}, 1)
	var handled []string
	h := stage.HandlerFunc(func(batch []sink.Event) error {
		for _, e := range batch {
			r := e.(*upperReq)
			if r.Value == "block" {
				entered <- struct{}{}
				<-block
			}
			handled = append(handled, r.Value)
			r.Reply(r.Value)
		}
		return nil
	})
	_, st := startOne(t, h, stage.StageConfig{
		ThreadPool: stage.ThreadPoolConfig{Min: 1, Max: 1},
		Batching:   stage.BatchingConfig{Max: 1},
	})
	first := stage.NewRequest[string, string](context.Background(), "block")
	if err := st.Sink().Enqueue(first); err != nil {
		t.Fatal(err)
	}
	<-entered // the only worker is busy: what follows stays queued

	ctx, cancel := context.WithCancel(context.Background())
	gone := stage.NewRequest[string, string](ctx, "gone")
	if err := st.Sink().Enqueue(gone); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := gone.Wait(nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after cancel: %v", err)
	}
	kept := stage.NewRequest[string, string](context.Background(), "kept")
	if err := st.Sink().Enqueue(kept); err != nil {
		t.Fatal(err)
	}
	close(block)
	if v, err := kept.Wait(nil); err != nil || v != "kept" {
		t.Fatalf("kept: %q, %v", v, err)
	}
	if got := st.Stats().Expired; got != 1 {
		t.Errorf("Stats.Expired = %d, want 1", got)
	}
	if strings.Join(handled, ",") != "block,kept" {
		t.Errorf("handled %v, want block,kept", handled)
	}
	if !gone.Answered() {
		t.Error("dropped request not answered")
	}
}

func TestCallDeadline(t *testing.T) {
	_, st := startOne(t, stage.HandlerFunc(func([]sink.Event) error { return nil }), stage.StageConfig{}) // never answers
	ctx, cancel := context.WithTimeout(context.Background(), 1)                                           // already over when waited on
	defer cancel()
	<-ctx.Done()
	_, err := stage.Call[string, string](ctx, st.Sink(), "x")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
}

func TestCallManagerStopped(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	st, err := m.CreateStage("S", stage.HandlerFunc(func([]sink.Event) error { return nil }), stage.StageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := stage.NewRequest[string, string](context.Background(), "x")
	if err := st.Sink().Enqueue(r); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wait(m.Done()); !errors.Is(err, stage.ErrCallAbandoned) {
		t.Fatalf("err = %v, want ErrCallAbandoned", err)
	}
}

// expiringEvent is an ExpiredEvent that records the stage that dropped it.
type expiringEvent struct {
	ctx     context.Context
	dropped chan string
}

func (e *expiringEvent) Context() context.Context { return e.ctx }
func (e *expiringEvent) Expired(stage string)     { e.dropped <- stage }

// An ExpiredEvent whose context ended while it was queued is told, with
// the name of the stage that dropped it, and never reaches the handler.
func TestExpiredEventIsTold(t *testing.T) {
	block := make(chan struct{})
	entered := make(chan struct{}, 1)
	var handled atomic.Int32
	h := stage.HandlerFunc(func(batch []sink.Event) error {
		for _, e := range batch {
			if e == "block" {
				entered <- struct{}{}
				<-block
			}
			handled.Add(1)
		}
		return nil
	})
	_, st := startOne(t, h, stage.StageConfig{
		ThreadPool: stage.ThreadPoolConfig{Min: 1, Max: 1},
		Batching:   stage.BatchingConfig{Max: 1},
	})
	if err := st.Sink().Enqueue("block"); err != nil {
		t.Fatal(err)
	}
	<-entered // the only worker is busy: what follows stays queued
	ctx, cancel := context.WithCancel(context.Background())
	ev := &expiringEvent{ctx: ctx, dropped: make(chan string, 1)}
	if err := st.Sink().Enqueue(ev); err != nil {
		t.Fatal(err)
	}
	cancel()
	close(block)
	if got := <-ev.dropped; got != st.Name() { // hang guard: the test's deadline
		t.Errorf("Expired(%q), want the stage's name %q", got, st.Name())
	}
	if got := st.Stats().Expired; got != 1 {
		t.Errorf("Stats.Expired = %d, want 1", got)
	}
	if n := handled.Load(); n != 1 {
		t.Errorf("handled %d events, want 1 (the expired one dropped)", n)
	}
}

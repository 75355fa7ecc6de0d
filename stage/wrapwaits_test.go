package stage_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestWrapWaitsTellsEveryEventsWait: a handler made by WrapWaits is told
// the queue wait of every event (the queue stamps all of them, not a
// sample), and called directly, outside the runtime, it is told -1s.
func TestWrapWaitsTellsEveryEventsWait(t *testing.T) {
	var got []time.Duration
	inner := stage.HandlerFunc(func([]sink.Event) error { return nil })
	h := stage.WrapWaits(inner, nil, func(batch []sink.Event, waits []time.Duration) error {
		if len(waits) != len(batch) {
			t.Errorf("%d waits for %d events", len(waits), len(batch))
		}
		got = append(got, waits...) // one goroutine: ThreadPool max 1
		return inner.HandleEvents(batch)
	})
	m := stage.NewManager(stage.Options{})
	st, err := m.CreateStage("S", h, stage.StageConfig{ThreadPool: stage.ThreadPoolConfig{Min: 1, Max: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := st.Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got) != 50 {
		t.Fatalf("told %d waits, want 50", len(got))
	}
	for i, w := range got {
		if w < 0 {
			t.Fatalf("event %d: wait %v, want it measured", i, w)
		}
	}
	got = nil
	_ = h.HandleEvents([]sink.Event{1})
	if len(got) != 1 || got[0] != -1 {
		t.Fatalf("outside the runtime: waits %v, want [-1]", got)
	}
}

package stage_test

import (
	"errors"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestStageSinkEnqueueEach: a stage's sink decides a batch each event on
// its own (sink.EachEnqueuer): what fits is handled, in order, the rest
// refused as Enqueue refuses it; once the stage is gone every event is
// refused as closed.
func TestStageSinkEnqueueEach(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	c := &collector{}
	st, err := m.CreateStage("Each", c, stage.StageConfig{Queue: stage.QueueConfig{Threshold: 3}})
	if err != nil {
		t.Fatal(err)
	}
	each, ok := st.Sink().(sink.EachEnqueuer)
	if !ok {
		t.Fatalf("a stage's sink (%T) is not a sink.EachEnqueuer", st.Sink())
	}
	// Not started yet: nothing is handled, so the queue fills.
	errs := make([]error, 5)
	if added := each.EnqueueEach([]sink.Event{0, 1, 2, 3, 4}, errs); added != 3 {
		t.Fatalf("added %d, want 3", added)
	}
	for i, err := range errs {
		if full := i >= 3; full != errors.Is(err, sink.ErrRejected) || (!full && err != nil) {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	if got := st.Stats().Enqueued; got != 3 {
		t.Fatalf("stage counts %d enqueued, want 3", got)
	}
	started(t, m)
	waitFor(t, "the queued events handled", func() bool { return len(c.snapshot()) == 3 })
	for i, e := range c.snapshot() {
		if e != i {
			t.Fatalf("handled %v at %d: order broken", e, i)
		}
	}
	if err := m.DestroyStage("Each"); err != nil {
		t.Fatal(err)
	}
	if added := each.EnqueueEach([]sink.Event{5, 6}, errs); added != 0 || !errors.Is(errs[0], sink.ErrClosed) || !errors.Is(errs[1], sink.ErrClosed) {
		t.Fatalf("after the stage is gone: added %d, errors %v", added, errs[:2])
	}
}

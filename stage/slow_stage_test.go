package stage_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestSlowStageFromYAMLGrows: the "Slow or blocking handlers" example of
// docs/yaml.md as a user writes it — `queue: {threshold: 10}`,
// `threadpool: {min: 1, max: 4}`, every other setting at its default —
// with a handler that blocks: kept at its threshold, the stage grows to 4
// workers that each hold a batch at once, and no batch takes more than
// half of what waits. The handler's slowness is a channel the test releases;
// the controller runs on its real 1 s interval, and the deadline only
// guards a hang.
func TestSlowStageFromYAMLGrows(t *testing.T) {
	const doc = `
stages:
  Reserve:
    handler: shop.Reserve
    queue: {threshold: 10}
    threadpool: {min: 1, max: 4}
`
	batches, release := make(chan int, 1000), make(chan struct{})
	r := stage.NewRegistry()
	r.Register("shop.Reserve", func() stage.Handler {
		return stage.HandlerFunc(func(b []sink.Event) error {
			batches <- len(b)
			<-release
			return nil
		})
	})
	m, err := stage.Parse([]byte(doc), r)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	st, _ := m.Stage("Reserve")
	inService := 0
	deadline := time.After(60 * time.Second) // hang guard
	for inService < 4 {
		for st.Sink().Enqueue(inService) == nil { // keep the queue at its threshold
		}
		select {
		case n := <-batches:
			inService++
			// At most half of what waits, rounded up: the queue at its
			// threshold of 10, plus the event an enqueue may hand a
			// parked worker directly (⌈11/2⌉ = 6).
			if n > 6 {
				t.Errorf("a worker took a batch of %d, more than half of the 11 events that can wait", n)
			}
		case <-time.After(10 * time.Millisecond): // refill while waiting
		case <-deadline:
			t.Fatalf("%d workers hold a batch, pool size %d; want 4", inService, st.Pool().Size())
		}
	}
	if size := st.Pool().Size(); size != 4 {
		t.Errorf("pool size %d with 4 batches in service, want 4", size)
	}
}

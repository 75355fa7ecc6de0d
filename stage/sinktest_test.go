package stage_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/sink/sinktest"
	"github.com/sandstorm-go/sandstorm/stage"
)

// handedOver is a handler giving every event to h, failing (FailEvent)
// those the suite takes with Fail.
func handedOver(h *sinktest.Handoff) stage.Handler {
	return stage.HandlerFunc(func(batch []sink.Event) error {
		return h.Handle(batch, func(i int) error { return stage.FailEvent(i, errors.New("failing on purpose")) })
	})
}

// TestStageSinkConformance runs sinktest on a stage's sink, its events
// handled (or failed) by the runtime's workers: the runtime reports
// every admitted event's completion to the predicate that admitted it.
func TestStageSinkConformance(t *testing.T) {
	for _, tm := range []string{"pool", "shared"} {
		t.Run(tm, func(t *testing.T) {
			sinktest.Run(t, func(t *testing.T) sinktest.Harness {
				m := stage.NewManager(stage.Options{ThreadManager: stage.ThreadManagerConfig{Type: tm, Threads: 2}})
				started(t, m)
				h := sinktest.NewHandoff()
				st, err := m.CreateStage("Work", handedOver(h), stage.StageConfig{})
				if err != nil {
					t.Fatal(err)
				}
				return sinktest.Harness{
					Sink:    st.Sink(),
					Consume: h.Consume,
					Fail:    h.Fail,
					Close: func() {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						if err := m.Shutdown(ctx); err != nil {
							t.Errorf("shutdown: %v", err)
						}
					},
					Limit: func(n int) (sink.Predicate, func() int) {
						c := enqueuepred.NewCounter(n)
						return c, c.(interface{ InFlight() int }).InFlight
					},
				}
			})
		})
	}
}

// TestNestedModifiedRunsInBackground: the runtime runs the background
// loop of a Modified nested in a composite (it reaches the predicate
// tree through sink.Composite), so its samplers are read with no traffic
// at all, never by a decision under the queue's lock.
func TestNestedModifiedRunsInBackground(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	started(t, m)
	st, err := m.CreateStage("Work", stage.HandlerFunc(func([]sink.Event) error { return nil }), stage.StageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var samples atomic.Int64
	mod, err := enqueuepred.NewModified(enqueuepred.NewCounter(10), enqueuepred.ModifiedConfig{Modifiers: []enqueuepred.Modifier{{
		Sampler:  countingSampler{&samples},
		Value:    []enqueuepred.Step{{At: 1, Degree: 1}},
		Interval: 5 * time.Millisecond,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	st.Sink().SetPredicate(enqueuepred.NewAll(enqueuepred.NewSession(mod, enqueuepred.SessionConfig{})))
	deadline := time.Now().Add(10 * time.Second)
	for samples.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the nested Modified was sampled %d times with no traffic: its Run loop is not running", samples.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// countingSampler is a load sampler that counts its samples and reads 0.
type countingSampler struct{ n *atomic.Int64 }

func (countingSampler) Name() string { return "count" }

func (s countingSampler) Sample(time.Time) (float64, error) {
	s.n.Add(1)
	return 0, nil
}

package enqueuepred

import (
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/sink/sinktest"
)

// TestWrappersLeakNoCredit runs the sink conformance suite on a queue
// guarded by each wrapper and composite of this package around a
// concurrency counter: the sink reaches the counter through
// sink.Composite (the wrappers forward no hook by hand), so every
// admitted event gives its credit back exactly once.
func TestWrappersLeakNoCredit(t *testing.T) {
	wraps := []struct {
		name string
		wrap func(c *counter) sink.Predicate
	}{
		{"counter", func(c *counter) sink.Predicate { return c }},
		{"all", func(c *counter) sink.Predicate { return newAll(newThreshold(1000), c) }},
		{"any", func(c *counter) sink.Predicate { return newAny(c, newAll(newThreshold(0))) }},
		{"session", func(c *counter) sink.Predicate { return newSession(c, SessionConfig{}) }},
		{"saturated", func(c *counter) sink.Predicate { return newSaturated(c, 0) }},
		{"accounting", func(c *counter) sink.Predicate { return newAccounting(c, AccountingConfig{}) }},
		{"modified", func(c *counter) sink.Predicate {
			m, err := newModified(c, ModifiedConfig{Modifiers: []Modifier{{
				Sampler: newEventSampler(kindWait),
				Value:   []Step{{At: 1e9, Degree: 1}},
			}}})
			if err != nil {
				t.Fatal(err)
			}
			return m
		}},
		{"nested", func(c *counter) sink.Predicate {
			return newAccounting(newSession(newAll(newSaturated(c, 0)), SessionConfig{}), AccountingConfig{})
		}},
	}
	for _, w := range wraps {
		t.Run(w.name, func(t *testing.T) {
			sinktest.Run(t, func(t *testing.T) sinktest.Harness {
				q := sink.NewNamedQueue("q", 0)
				return sinktest.Harness{
					Sink:              q,
					Consume:           func() (sink.Event, bool) { return takeDone(q) },
					Close:             q.Close,
					ConsumeAfterClose: true,
					LenExact:          true,
					Limit: func(n int) (sink.Predicate, func() int) {
						c := newCounter(n)
						return w.wrap(c), c.InFlight
					},
				}
			})
		})
	}
}

// takeDone dequeues one event and completes it as the runtime does.
func takeDone(q *sink.Queue) (sink.Event, bool) {
	buf, stamps := make([]sink.Event, 1), make([]int64, 1)
	deadline := time.Now().Add(5 * time.Second)
	for q.Dequeue(buf, stamps) == 0 {
		if time.Now().After(deadline) {
			return nil, false
		}
		time.Sleep(50 * time.Microsecond)
	}
	rt := sinkrt.Of(q)
	if c := rt.CompleterAt(stamps[0]); c != nil {
		c.Done(buf[0], time.Duration(sink.Nanotime()-stamps[0]), 0)
	}
	rt.Finish(1)
	return buf[0], true
}

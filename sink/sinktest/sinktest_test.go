package sinktest_test

import (
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/sink/sinktest"
)

// queueHarness drives a bare sink.Queue as the runtime does: Consume
// dequeues one event, reports it done to the predicate that admitted it
// and finishes it.
func queueHarness(capacity int, sched func() sink.Scheduler) func(t *testing.T) sinktest.Harness {
	return func(t *testing.T) sinktest.Harness {
		q := sink.NewNamedQueue("q", capacity)
		if sched != nil {
			if err := q.SetScheduler(sched()); err != nil {
				t.Fatal(err)
			}
		}
		take := func() (sink.Event, bool) {
			buf, stamps := make([]sink.Event, 1), make([]int64, 1)
			deadline := time.After(5 * time.Second)
			for q.Dequeue(buf, stamps) == 0 {
				select {
				case <-q.Ready():
				case <-time.After(time.Millisecond):
				case <-deadline:
					return nil, false
				}
			}
			rt := sinkrt.Of(q)
			if c := rt.CompleterAt(stamps[0]); c != nil {
				c.Done(buf[0], time.Duration(sink.Nanotime()-stamps[0]), 0)
			}
			rt.Finish(1)
			return buf[0], true
		}
		return sinktest.Harness{
			Sink:              q,
			Consume:           take,
			Close:             q.Close,
			ConsumeAfterClose: true,
			LenExact:          true,
			Limit: func(n int) (sink.Predicate, func() int) {
				c := enqueuepred.NewCounter(n)
				return c, c.(interface{ InFlight() int }).InFlight
			},
		}
	}
}

func TestQueue(t *testing.T) {
	t.Run("unbounded", func(t *testing.T) { sinktest.Run(t, queueHarness(0, nil)) })
	t.Run("bounded", func(t *testing.T) { sinktest.Run(t, queueHarness(1000, nil)) })
	t.Run("lifo", func(t *testing.T) { sinktest.Run(t, queueHarness(1000, sink.NewLIFO)) })
	t.Run("priority", func(t *testing.T) {
		sinktest.Run(t, queueHarness(0, func() sink.Scheduler {
			return sink.NewPriority(func(e sink.Event) int { return e.(int) % 3 })
		}))
	})
}

// TestMailbox runs the suite on the example's sink (example_test.go).
func TestMailbox(t *testing.T) { mailboxConformance(t) }

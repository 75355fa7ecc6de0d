package remote_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/sink/sinktest"
	"github.com/sandstorm-go/sandstorm/stage"
)

// handed is a handler that hands every event to the test and waits for
// its outcome: true handled, false failed.
type handed struct {
	out     chan sink.Event
	verdict chan bool
}

func newHanded() *handed {
	return &handed{out: make(chan sink.Event), verdict: make(chan bool)}
}

func (h *handed) HandleEvents(batch []sink.Event) error {
	var errs []error
	for i, e := range batch {
		h.out <- e
		if !<-h.verdict {
			errs = append(errs, stage.FailEvent(i, errors.New("failing on purpose")))
		}
	}
	return errors.Join(errs...)
}

// take is Harness.Consume (ok true) or Fail (ok false).
func (h *handed) take(ok bool) (sink.Event, bool) {
	select {
	case e := <-h.out:
		h.verdict <- ok
		return e, true
	case <-time.After(10 * time.Second):
		return nil, false
	}
}

const sinktestGraph = `
global:
  cluster: {node: a}
stages:
  Work:
    handler: t.Work
    nodes: [b]
    remote: {mode: %s, timeout: 2s, nakDelay: 10ms}
`

// remoteHarness runs the sink of stage Work, hosted on node b, from node
// a. Close shuts node b's manager down: its replica answers "closed".
func remoteHarness(mode string) func(t *testing.T) sinktest.Harness {
	return func(t *testing.T) sinktest.Harness {
		graph := fmt.Sprintf(sinktestGraph, mode)
		c := &cluster{t: t}
		ma, na := c.node(graph, "a", nil)
		work := newHanded()
		mb, _ := c.node(graph, "b", map[string]stage.Handler{"Work": work})
		s := remoteSink(t, ma, "Work")
		waitFor(t, "a replica of Work", func() bool { return s.Enqueue(0) == nil })
		if e, ok := work.take(true); !ok || e != 0 {
			t.Fatalf("probe event: %v %v", e, ok)
		}
		h := sinktest.Harness{
			Sink:    s,
			Limit:   counterLimit,
			Consume: func() (sink.Event, bool) { return work.take(true) },
			Close: func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := mb.Shutdown(ctx); err != nil {
					t.Errorf("shut down node b's manager: %v", err)
				}
			},
		}
		if mode == "request" {
			// A failure is the replica's business: the sender's
			// predicate was done with the event at the verdict.
			h.Fail = func() (sink.Event, bool) { return work.take(false) }
		} else {
			// The stream stores what it is sent whether or not a
			// replica runs: shutting the replica down does not close
			// the sink; closing the stream's connection refuses.
			h.Close = func() { _ = na.Close() }
			h.ClosedErr = sink.ErrRejected
		}
		return h
	}
}

// counterLimit is enqueuepred's concurrency counter, for the suite's
// credit tests.
func counterLimit(n int) (sink.Predicate, func() int) {
	c := enqueuepred.NewCounter(n)
	return c, func() int { return int(c.InFlight()) }
}

func TestSinktestRequest(t *testing.T) { sinktest.Run(t, remoteHarness("request")) }
func TestSinktestDurable(t *testing.T) { sinktest.Run(t, remoteHarness("durable")) }

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

// handedOver is a handler giving every event to h, failing (FailEvent)
// those the suite takes with Fail.
func handedOver(h *sinktest.Handoff) stage.Handler {
	return stage.HandlerFunc(func(batch []sink.Event) error {
		return h.Handle(batch, func(i int) error { return stage.FailEvent(i, errors.New("failing on purpose")) })
	})
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
		work := sinktest.NewHandoff()
		mb, _ := c.node(graph, "b", map[string]stage.Handler{"Work": handedOver(work)})
		s := remoteSink(t, ma, "Work")
		waitFor(t, "a replica of Work", func() bool { return s.Enqueue(0) == nil })
		if e, ok := work.Consume(); !ok || e != 0 {
			t.Fatalf("probe event: %v %v", e, ok)
		}
		h := sinktest.Harness{
			Sink:    s,
			Limit:   counterLimit,
			Consume: work.Consume,
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
			h.Fail = work.Fail
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
	return c, c.(interface{ InFlight() int }).InFlight
}

func TestSinktestRequest(t *testing.T) { sinktest.Run(t, remoteHarness("request")) }
func TestSinktestDurable(t *testing.T) { sinktest.Run(t, remoteHarness("durable")) }

// TestSenderCreditOnTransportFailures: events the sender-side predicate
// admitted but no replica took (none up, then a replica refusing for a
// full queue, then the stream full) give their credit back.
func TestSenderCreditOnTransportFailures(t *testing.T) {
	t.Run("no replica", func(t *testing.T) {
		c := &cluster{t: t}
		ma, _ := c.node(requestGraph, "a", nil)
		s := remoteSink(t, ma, "Work")
		l := sinktest.NewLimiter(2)
		s.SetPredicate(l)
		for i := 0; i < 5; i++ {
			if err := s.Enqueue(i); !errors.Is(err, sink.ErrRejected) {
				t.Fatalf("no replica: %v", err)
			}
		}
		if err := s.EnqueueMany([]sink.Event{10, 11}); !errors.Is(err, sink.ErrRejected) {
			t.Fatalf("no replica: %v", err)
		}
		if _, err := s.Prepare([]sink.Event{12}); !errors.Is(err, sink.ErrRejected) {
			t.Fatalf("no replica: %v", err)
		}
		noCreditHeld(t, l)
	})
	// A held replica (request mode, a queue of 4) refuses events; so does
	// a full stream (durable mode, 3 messages).
	for _, tc := range []struct {
		name, graph string
		probe       bool // wait for a replica to take an event first
		overflow    string
	}{
		{"replica full", requestGraph, true, "a held replica with a queue of 4 took 10 events"},
		{"stream full", durableGraph, false, "a stream of 3 took 10 events"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &cluster{t: t}
			ma, _ := c.node(tc.graph, "a", nil)
			gate := make(chan struct{})
			defer close(gate)
			_, _ = c.node(tc.graph, "b", map[string]stage.Handler{"Work": &recorder{gate: gate}})
			s := remoteSink(t, ma, "Work")
			if tc.probe {
				waitFor(t, "a replica", func() bool { return s.Enqueue("probe") == nil })
			}
			l := sinktest.NewLimiter(100)
			s.SetPredicate(l)
			refused := 0
			for i := 0; i < 10; i++ {
				if err := s.Enqueue(i); errors.Is(err, sink.ErrRejected) {
					refused++
				}
			}
			if refused == 0 {
				t.Fatal(tc.overflow)
			}
			noCreditHeld(t, l)
		})
	}
}

// noCreditHeld fails t if an event admitted by l still holds its credit.
func noCreditHeld(t *testing.T, l *sinktest.Limiter) {
	t.Helper()
	if n := l.InFlight(); n != 0 || l.Err() != nil {
		t.Fatalf("%d events hold credit (%v)", n, l.Err())
	}
}

// TestSinktestRef runs the suite on a reference sink: node b exports a
// local queue, node a imports the reference and enqueues through it.
// Close closes the queue on b: its node answers "closed". References take
// no transactions (NoTxn).
func TestSinktestRef(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) sinktest.Harness {
		c := &cluster{t: t}
		_, na := c.node(requestGraph, "a", nil)
		_, nb := c.node(requestGraph, "b", nil)
		q := sink.NewNamedQueue("replies", 0)
		ref, err := nb.Wire().ExportSink(q)
		if err != nil {
			t.Fatal(err)
		}
		s := na.Wire().ImportSink(ref)
		return sinktest.Harness{
			Sink: s,
			Consume: func() (sink.Event, bool) {
				buf := make([]sink.Event, 1)
				deadline := time.Now().Add(10 * time.Second)
				for q.Dequeue(buf, nil) == 0 {
					if time.Now().After(deadline) {
						return nil, false
					}
					time.Sleep(100 * time.Microsecond)
				}
				return buf[0], true
			},
			Close:             q.Close,
			ConsumeAfterClose: true,
			NoTxn:             true,
			Limit:             counterLimit,
		}
	})
}

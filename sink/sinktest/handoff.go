package sinktest

import (
	"errors"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// Handoff is the consumer side of a Harness for a sink whose events a
// handler runs (a stage's sink, a remote sink): the handler gives each
// event to Handle, which waits until the suite takes it with Consume
// (handled) or Fail (failed).
type Handoff struct {
	out     chan sink.Event
	verdict chan bool
}

// NewHandoff returns a Handoff with no event waiting.
func NewHandoff() *Handoff {
	return &Handoff{out: make(chan sink.Event), verdict: make(chan bool)}
}

// Handle hands the events of batch, in order, to Consume or Fail,
// waiting for each to be taken. It returns the errors failed makes for
// the indexes of the events taken by Fail, joined (nil if none was).
func (h *Handoff) Handle(batch []sink.Event, failed func(i int) error) error {
	var errs []error
	for i, e := range batch {
		h.out <- e
		if !<-h.verdict {
			errs = append(errs, failed(i))
		}
	}
	return errors.Join(errs...)
}

// Consume takes the next event handed over as handled (Harness.Consume):
// false if none came within 10 s.
func (h *Handoff) Consume() (sink.Event, bool) { return h.take(true) }

// Fail takes the next event handed over as failed (Harness.Fail).
func (h *Handoff) Fail() (sink.Event, bool) { return h.take(false) }

func (h *Handoff) take(handled bool) (sink.Event, bool) {
	select {
	case e := <-h.out:
		h.verdict <- handled
		return e, true
	case <-time.After(10 * time.Second):
		return nil, false
	}
}

package stage

import (
	"errors"
	"fmt"

	"github.com/sandstorm-go/sandstorm/sink"
)

// ErrWrongType is wrapped by the failure of an event that a typed handler
// (Typed, TypedFunc) got but that is not of its type.
var ErrWrongType = errors.New("stage: event of the wrong type")

// BatchHandler is a handler written for one event type: it gets []T, not
// []sink.Event. Wrap it with Typed to make a Handler. It may implement
// Initializer, Destroyer and SingleThreaded; Typed forwards them.
type BatchHandler[T any] interface {
	Handle(batch []T) error
}

// Typed returns a Handler that hands h its batches as []T. The stage, its
// queue, its YAML wiring and its registry entry are as for any handler:
//
//	reg.Register("orders.Price", func() stage.Handler { return stage.Typed[*Order](&price{}) })
//
// An event that is not a T is not given to h: it fails on its own (an
// EventError wrapping ErrWrongType) while h handles the others. An
// EventError h returns names an index in the []T it got; Typed maps it
// back to the batch.
func Typed[T any](h BatchHandler[T]) Handler {
	t := typed[T]{h: h}
	if _, ok := h.(SingleThreaded); ok {
		return &typedSingle[T]{t}
	}
	return &t
}

// TypedFunc returns a Handler that hands f its batches as []T; see Typed.
func TypedFunc[T any](f func(batch []T) error) Handler {
	return Typed[T](batchFunc[T](f))
}

type batchFunc[T any] func([]T) error

func (f batchFunc[T]) Handle(batch []T) error { return f(batch) }

type typed[T any] struct{ h BatchHandler[T] }

// typedSingle is typed for a SingleThreaded handler.
type typedSingle[T any] struct{ typed[T] }

func (*typedSingle[T]) SingleThreaded() {}

// Init forwards to the wrapped handler's Init, if it has one.
func (t *typed[T]) Init(c *Context) error {
	if in, ok := t.h.(Initializer); ok {
		return in.Init(c)
	}
	return nil
}

// Destroy forwards to the wrapped handler's Destroy, if it has one.
func (t *typed[T]) Destroy() error {
	if d, ok := t.h.(Destroyer); ok {
		return d.Destroy()
	}
	return nil
}

// Unwrap returns the wrapped handler.
func (t *typed[T]) Unwrap() BatchHandler[T] { return t.h }

func (t *typed[T]) HandleEvents(batch []sink.Event) error {
	ts := make([]T, 0, len(batch))
	var pos []int // pos[i]: index in batch of ts[i], when some events were left out
	var wrong []error
	for i, e := range batch {
		v, ok := e.(T)
		if !ok {
			if pos == nil {
				pos = make([]int, len(ts), len(batch))
				for j := range pos {
					pos[j] = j
				}
			}
			var zero T
			wrong = append(wrong, FailEvent(i, fmt.Errorf("%w: got %T, want %T", ErrWrongType, e, zero)))
			continue
		}
		ts = append(ts, v)
		if pos != nil {
			pos = append(pos, i)
		}
	}
	var err error
	if len(ts) > 0 {
		err = t.h.Handle(ts)
	}
	if pos != nil && err != nil {
		ees := eventErrors(err, len(ts))
		if ees == nil {
			// The whole typed batch failed; name each of its events so
			// the wrong-typed ones stay failures of their own.
			for _, i := range pos {
				wrong = append(wrong, FailEvent(i, err))
			}
		} else {
			for _, ee := range ees {
				wrong = append(wrong, FailEvent(pos[ee.Index], ee.Err))
			}
		}
		err = nil
	}
	if len(wrong) == 0 {
		return err
	}
	return errors.Join(append(wrong, err)...)
}

// TypedSink enqueues values of one type on a sink.
type TypedSink[T any] struct{ s sink.Sink }

// SinkOf returns s as a TypedSink[T].
func SinkOf[T any](s sink.Sink) TypedSink[T] { return TypedSink[T]{s} }

// SinkFor returns the sink of the stage named name as a TypedSink[T],
// traced from c's stage like Context.Sink.
func SinkFor[T any](c *Context, name string) (TypedSink[T], error) {
	s, err := c.Sink(name)
	return TypedSink[T]{s}, err
}

// Enqueue enqueues v; see sink.Sink.Enqueue.
func (t TypedSink[T]) Enqueue(v T) error { return t.s.Enqueue(v) }

// EnqueueLossy enqueues v and reports whether it was accepted.
func (t TypedSink[T]) EnqueueLossy(v T) bool { return t.s.EnqueueLossy(v) }

// EnqueueMany enqueues all of vs or none.
func (t TypedSink[T]) EnqueueMany(vs []T) error {
	es := make([]sink.Event, len(vs))
	for i, v := range vs {
		es[i] = v
	}
	return t.s.EnqueueMany(es)
}

// Sink returns the underlying sink.
func (t TypedSink[T]) Sink() sink.Sink { return t.s }

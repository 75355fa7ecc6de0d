package sink

import (
	"errors"
	"fmt"
	"time"
)

// Event is anything that can be placed on a queue. Keep events plain data
// where you can: it keeps stages testable and replicable.
type Event = any

// Sentinel errors. Errors returned by a Sink wrap one of them, so test with
// errors.Is.
var (
	// ErrRejected means admission control refused the event: the queue is
	// full or its predicate said no.
	ErrRejected = errors.New("sink: enqueue rejected")
	// ErrClosed means the sink's stage was destroyed or shut down.
	ErrClosed = errors.New("sink: closed")
)

// Predicate is an admission-control policy run on every enqueue attempt, in
// the enqueuing goroutine. It must be fast and safe for concurrent use.
type Predicate interface {
	Accept(e Event) bool
}

// PredicateFunc adapts a function to Predicate.
type PredicateFunc func(Event) bool

// Accept calls f(e).
func (f PredicateFunc) Accept(e Event) bool { return f(e) }

// Txn is a prepared (split-phase) enqueue: the events have passed admission
// and hold capacity, but are invisible to consumers until Commit. Exactly one
// of Commit or Abort takes effect; later calls do nothing.
type Txn interface {
	Commit()
	Abort()
}

// Sink is the enqueue end of a stage's event queue.
type Sink interface {
	// Enqueue adds e or returns an error wrapping ErrRejected or ErrClosed.
	Enqueue(e Event) error
	// EnqueueMany adds all of es or none of them.
	EnqueueMany(es []Event) error
	// EnqueueLossy adds e if the queue accepts it and reports whether it did.
	// A refused event is counted as dropped.
	EnqueueLossy(e Event) bool
	// Prepare admits es and reserves room for them; see Txn.
	Prepare(es []Event) (Txn, error)
	// Len is the number of events waiting.
	Len() int
	// SetPredicate replaces the admission predicate (nil: accept all).
	SetPredicate(p Predicate)
	// Predicate returns the current admission predicate, or nil.
	Predicate() Predicate
}

// Binder is implemented by predicates that need the sink they guard (for
// example to read its length). SetPredicate calls Bind before installing.
type Binder interface {
	Bind(s Sink)
}

// Completer is implemented by predicates that want to know when an admitted
// event has been handled. queued is the time the event spent in the queue,
// service the time its handler took (for a batch, the batch's time).
type Completer interface {
	Done(e Event, queued, service time.Duration)
}

// Canceler is implemented by predicates that hold resources for admitted
// events (credits, tokens) and must get them back when an admitted event was
// not kept after all.
type Canceler interface {
	Cancel(e Event)
}

// BatchPredicate is implemented by predicates that can decide for a batch at
// once without consuming anything when the answer is no.
type BatchPredicate interface {
	AcceptMany(es []Event) bool
}

// Namer names a predicate in errors and metrics.
type Namer interface {
	Name() string
}

// Done reports a completed event to p if p implements Completer.
func Done(p Predicate, e Event, queued, service time.Duration) {
	if c, ok := p.(Completer); ok {
		c.Done(e, queued, service)
	}
}

// Cancel reports an admitted-but-not-kept event to p if p implements Canceler.
func Cancel(p Predicate, e Event) {
	if c, ok := p.(Canceler); ok {
		c.Cancel(e)
	}
}

// PredicateName returns p's Name if it has one, or its type.
func PredicateName(p Predicate) string {
	if n, ok := p.(Namer); ok {
		return n.Name()
	}
	return fmt.Sprintf("%T", p)
}

// RejectError says which sink refused an event and why. It wraps ErrRejected.
type RejectError struct {
	Sink      string // the sink's (stage's) name
	Predicate string // the predicate that refused, or "" for a full queue
	Reason    string // short human-readable reason
}

func (e *RejectError) Error() string {
	if e.Predicate != "" {
		return fmt.Sprintf("sink %q: enqueue rejected by predicate %s: %s", e.Sink, e.Predicate, e.Reason)
	}
	return fmt.Sprintf("sink %q: enqueue rejected: %s", e.Sink, e.Reason)
}

// Unwrap returns ErrRejected.
func (e *RejectError) Unwrap() error { return ErrRejected }

// ClosedError says which sink was closed. It wraps ErrClosed.
type ClosedError struct {
	Sink string
}

func (e *ClosedError) Error() string { return fmt.Sprintf("sink %q: closed", e.Sink) }

// Unwrap returns ErrClosed.
func (e *ClosedError) Unwrap() error { return ErrClosed }

// NonRejectable is implemented by events that must never be refused, such
// as a session teardown or an emergency call (JOBS §6.4): a Queue admits
// them beyond its capacity (only a closed queue refuses them), and every
// predicate of package enqueuepred admits them too.
type NonRejectable interface {
	NonRejectable() bool
}

// IsNonRejectable reports whether e must bypass admission control.
func IsNonRejectable(e Event) bool {
	v, ok := e.(NonRejectable)
	return ok && v.NonRejectable()
}

// allNonRejectable reports whether every event of es is non-rejectable.
func allNonRejectable(es []Event) bool {
	for _, e := range es {
		if !IsNonRejectable(e) {
			return false
		}
	}
	return true
}

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

// The runtime's predicate hooks. A predicate implements the ones it
// needs, found by type assertion: Binder, Completer, Canceler, Shedder
// (age.go), and Composite if it is built on other predicates. A
// predicate implements its own hooks only and never forwards them to its
// children: the sink reaches every predicate of the tree through
// Composite (Admission at SetPredicate; Bind, Done, Cancel and Shed
// here). Namer only names a predicate.

// Binder is implemented by predicates that need the sink they guard (for
// example to read its length). SetPredicate binds every Binder of the
// predicate's tree before installing it.
type Binder interface {
	Bind(s Sink)
}

// Completer is implemented by predicates that want to know when an admitted
// event has been handled. queued is the time the event spent in the queue,
// service the time its handler took (for a batch, the batch's time; see
// ServiceSharer).
type Completer interface {
	Done(e Event, queued, service time.Duration)
}

// ServiceSharer is implemented by Completers that charge each event for
// its own handling, such as per-principal accounting. A stage's runtime
// hands its handler batches and cannot see inside one, so a Completer's
// Done gets the batch's handler time: each event waited for the whole
// batch, which is its response time, what a response-time controller
// wants. A ServiceSharer's Done gets the event's share of it instead, the
// batch's time divided by its length, so that the times charged for a
// batch add up to the batch's time. For an event handled alone (a batch
// of one, a connection's write) both are the same.
type ServiceSharer interface {
	Completer
	SharesService()
}

// Canceler is implemented by predicates that hold resources for admitted
// events (credits, tokens) and must get them back when an admitted event was
// not kept after all.
type Canceler interface {
	Cancel(e Event)
}

// Composite is implemented by predicates built on others (a wrapper, a
// conjunction): Children returns them, the same predicates every time;
// callers must not modify the slice. The hooks of every predicate of the
// tree are found through it, so a Composite forwards none of them.
type Composite interface {
	Children() []Predicate
}

// Namer names a predicate in errors and metrics.
type Namer interface {
	Name() string
}

// Walk calls fn for p and, depth first, every predicate it is built from
// (Composite). It does nothing for a nil p.
func Walk(p Predicate, fn func(Predicate)) {
	if p == nil {
		return
	}
	fn(p)
	if c, ok := p.(Composite); ok {
		for _, child := range c.Children() {
			Walk(child, fn)
		}
	}
}

// Bind binds every Binder of p's tree to s.
func Bind(p Predicate, s Sink) {
	if b, ok := p.(Binder); ok {
		b.Bind(s)
	}
	if c, ok := p.(Composite); ok {
		for _, child := range c.Children() {
			Bind(child, s)
		}
	}
}

// Done reports a completed event to every Completer of p's tree. A sink
// completes through the Ticket of the event's Admission instead.
func Done(p Predicate, e Event, queued, service time.Duration) {
	if c, ok := p.(Completer); ok {
		c.Done(e, queued, service)
	}
	if c, ok := p.(Composite); ok {
		for _, child := range c.Children() {
			Done(child, e, queued, service)
		}
	}
}

// Cancel reports an admitted-but-not-kept event to every Canceler of p's
// tree: a composite that refuses an event after some of its children
// admitted it gives it back to them this way.
func Cancel(p Predicate, e Event) {
	if c, ok := p.(Canceler); ok {
		c.Cancel(e)
	}
	if c, ok := p.(Composite); ok {
		for _, child := range c.Children() {
			Cancel(child, e)
		}
	}
}

// Shed reports whether a Shedder of p's tree sheds e, queued for waited.
func Shed(p Predicate, e Event, waited time.Duration) bool {
	if s, ok := p.(Shedder); ok && s.Shed(e, waited) {
		return true
	}
	if c, ok := p.(Composite); ok {
		for _, child := range c.Children() {
			if Shed(child, e, waited) {
				return true
			}
		}
	}
	return false
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

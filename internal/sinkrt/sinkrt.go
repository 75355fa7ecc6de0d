// Package sinkrt is the bridge through which the runtime (packages
// threadpool and stage) reaches the parts of a sink.Queue that producers
// and handlers must not touch: parking a worker on the queue, waking
// workers, redirecting the queue's wake-ups to a shared pool, counting
// events finished, pausing the queue while a handler is swapped,
// releasing a scheduler's held-back events, and removing or expiring
// queued events unhandled. Being internal, it keeps those operations out
// of sink's public API.
//
// Package sink installs Of from its init function; every program that has
// a *sink.Queue has package sink linked in.
package sinkrt

import "time"

// Queue is the runtime's view of a *sink.Queue.
type Queue interface {
	// Park waits until the queue may have work for the consumer w. An
	// event enqueued on the empty queue while w is parked is handed to it
	// directly: the result, with ok true, already dequeued. With ok false
	// the consumer looks again with Dequeue.
	Park(w *Waiter) (e any, stamp int64, ok bool)
	// Enlist is Park without the wait, for a consumer that receives from
	// w.C itself: it reports true when w is parked (the consumer must
	// then receive one Handoff from w.C), false when Park would have
	// returned at once with ok false. Receiving in the consumer's own
	// loop spares the two returns that a resumed goroutine mispredicts
	// (its return stack belongs to the goroutine that ran before it).
	Enlist(w *Waiter) bool
	// WakeAll wakes every parked consumer and leaves a token for one about
	// to park.
	WakeAll()
	// Signal wakes one consumer (a parked one, else a waiter on Ready).
	Signal()
	// SetReady makes the queue signal ch instead of its own Ready channel,
	// so that one group of consumers can wait for several queues. Call it
	// before the queue is used.
	SetReady(ch chan struct{})
	// Parked is the number of consumers parked now. ParkedLocked is
	// Parked for a predicate's Accept, which the queue runs with its lock
	// held.
	Parked() int
	ParkedLocked() int
	// NotifyBacklog arms ch to receive one token once an event queued
	// instead of being handed to a parked consumer (every consumer was
	// busy) makes the queue hold below events, and reports true; it
	// reports false, arming nothing, when below or more events are
	// queued already. A pool's controller that has nothing to do waits
	// on it instead of ticking.
	NotifyBacklog(ch chan struct{}, below int) bool

	// MayComplete reports whether completions may be owed to a
	// predicate: the installed one, or one it replaced, is a Completer.
	// CompleterAt returns the Completer owed the completion of an event
	// with entry stamp stamp (from Dequeue or a hand-off): the predicate
	// installed when the event was admitted, if it is a Completer, else
	// nil.
	MayComplete() bool
	CompleterAt(stamp int64) Completer
	// StampAll makes the queue stamp every event it takes from now on
	// (not only a sample), for a handler told each event's queue wait.
	StampAll()

	// Finish reports n events the runtime took out (Dequeue or a
	// hand-off) as done with: handled, failed or given up. Finished is
	// how many were reported; InService is how many were taken out and
	// not yet finished.
	Finish(n int)
	Finished() uint64
	InService() int
	// InServiceLocked is InService for a predicate's Accept, which the
	// queue runs with its lock held.
	InServiceLocked() int

	// Pause stops the queue from handing out events until the matching
	// Resume (pauses nest); enqueues go on. The runtime pauses a stage's
	// queue while it swaps the stage's handler. Paused reports whether
	// the queue is paused.
	Pause()
	Resume()
	Paused() bool
	// Runnable is the number of events Dequeue could hand out now (fewer
	// than Len when a scheduler holds events back, 0 while paused).
	Runnable() int
	// Release tells the queue's scheduler that a batch is finished, so
	// that events held back behind it may run.
	Release(events []any)
	// RemoveIf takes the queued events for which f returns true out of
	// the queue, unhandled, and returns them; their predicate gets them
	// back as cancelled.
	RemoveIf(f func(any) bool) []any
	// Sheds reports whether Expire may remove events (an age limit is
	// set, or the predicate sheds queued events). Expire moves the
	// events of a dequeued batch that waited too long, or that the
	// predicate sheds, to its end and returns how many are kept.
	Sheds() bool
	Expire(events []any, stamps []int64, now int64) (kept int)
}

// Completer is sink.Completer: a predicate told each admitted event's
// queueing and service time when the runtime is done with it.
type Completer interface {
	Done(e any, queued, service time.Duration)
}

// BatchCompleter is a Completer that can also complete an event handled
// in a batch of n events that took service in all: it charges
// sink.ServiceSharers the event's share (service/n) and the other
// Completers service. CompleterAt returns one when the predicate's tree
// holds a ServiceSharer; with any other Completer Done is all there is.
type BatchCompleter interface {
	Completer
	DoneInBatch(e any, queued, service time.Duration, n int)
}

// Waiter is one consumer goroutine's handle for Park.
type Waiter struct {
	C chan Handoff // holds at most one hand-off
}

// Handoff is what a parked consumer is woken with: an event (OK) or a bare
// wake-up.
type Handoff struct {
	Ev    any
	Stamp int64
	OK    bool
}

// NewWaiter returns a Waiter for one consumer goroutine.
func NewWaiter() *Waiter { return &Waiter{C: make(chan Handoff, 1)} }

// Of returns the runtime view of q, a *sink.Queue. Set by package sink.
var Of func(q any) Queue

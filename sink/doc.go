// Package sink defines the enqueue side of a SEDA event queue: the Sink
// interface every stage exposes, admission-control predicates, rejection
// errors, and Queue, the bounded multi-producer/multi-consumer queue that
// backs every stage.
//
// What to use first:
//
//   - Producers: Sink.Enqueue and errors.Is(err, ErrRejected): a
//     rejection is the overload signal to act on (drop, degrade, answer
//     503, back off). EnqueueWait waits instead, for producers that
//     prefer back-pressure. Queue is what the runtime builds for every
//     stage; you rarely make one.
//   - Writing a Sink (a connection, a remote sender): hold its predicate
//     in an Admission. It binds, decides, counts rejections, and hands
//     out a Ticket per admitted event through which the sink completes
//     (Done) or cancels (Cancel) that event exactly once. Then run the
//     conformance suite, package sinktest, on it.
//   - Writing a predicate: implement Accept, and the hooks below that you
//     need; build on others through Composite.
//
// Enqueue is synchronous: a queue accepts an event or rejects it at once with
// an error wrapping ErrRejected (a full queue or a predicate said no) or
// ErrClosed (the stage was destroyed). A rejection is the overload signal the
// caller must react to: drop, degrade, answer 503, or apply back-pressure with
// EnqueueWait.
//
// Handlers only ever see Sink; taking events off a stage's queue is the
// runtime's job, and a stage's *Queue is never handed out. A Queue you make
// yourself (a monitor's mailbox, a reply queue) is read with Dequeue, Ready
// and Discard. The runtime's own operations on a queue — parking and
// waking its goroutines, counting events finished, pausing the queue while
// a handler is swapped, releasing a scheduler's held-back events, removing
// or expiring queued events unhandled — go through an internal bridge
// (internal/sinkrt), out of reach of producers. An Enqueue that finds the
// queue empty and a worker parked hands the event to that worker directly,
// as a channel send to a waiting receiver does.
//
// A Queue is FIFO by default, on a lock-protected ring. A Scheduler changes
// the order in which the runtime gets events (Whirlwind §III.E): NewLIFO
// (newest first), NewPriority, NewStride (proportional share between
// classes by tickets), NewShortest (shortest first within a batch) and
// NewKeyed, which runs the events of one key one at a time in FIFO order
// while different keys run in parallel (the runtime tells the scheduler
// when a batch is finished, so the next event of a key may run).
//
// Predicates may implement a few hooks, found by type assertion on every
// predicate of the installed one's tree (through Composite):
//
//   - Binder: Bind(s Sink) is called by SetPredicate so that length-based
//     policies can see the sink they guard.
//   - Completer: Done(e, queued, service) is called when the sink is done
//     with an admitted event (a stage's handler ran on it, successfully
//     or not; a connection wrote it; a replica took it), so counters can
//     return credit and response-time controllers can measure.
//   - Canceler: Cancel(e) is called for an event the predicate admitted
//     but the sink did not keep (full or closed queue, aborted
//     transaction, send failed, event expired or removed unhandled).
//   - Shedder: Shed(e, waited) lets a predicate drop queued events at
//     dequeue (CoDel).
//   - Composite: Children() lists the predicates one is built on. A
//     composite or wrapper forwards none of the hooks above: the sink
//     reaches every predicate of the tree (Admission, and Walk, Bind,
//     Done, Cancel and Shed for code holding a predicate).
//   - Namer: Name() string names the predicate in rejections and metrics.
//
// Each admitted event gets exactly one Done or Cancel, on the predicate
// that admitted it even if SetPredicate has replaced it since.
package sink

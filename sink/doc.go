// Package sink defines the enqueue side of a SEDA event queue: the Sink
// interface every stage exposes, admission-control predicates, rejection
// errors, and Queue, the bounded multi-producer/multi-consumer queue that
// backs every stage.
//
// Start with Sink.Enqueue and errors.Is(err, ErrRejected): a rejection is
// the overload signal to act on (drop, degrade, answer 503, back off).
// EnqueueWait waits instead, for producers that prefer back-pressure.
// Queue is what the runtime builds for every stage; you rarely make one.
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
// Predicates may implement optional hooks found by type assertion:
//
//   - Binder: Bind(s Sink) is called by SetPredicate so that length-based
//     policies can see the queue they guard.
//   - Completer: Done(e, queued, service) is called by the runtime when a
//     handler has finished with an admitted event (success or failure), so
//     counters can return credit and response-time controllers can measure.
//   - Canceler: Cancel(e) is called for an event the predicate accepted but the
//     queue did not keep (aborted transaction, full queue, closed queue).
//   - BatchPredicate: AcceptMany(es) decides for a whole EnqueueMany batch at
//     once (all or nothing) without consuming partial credit.
//   - Namer: Name() string names the predicate in rejection errors and metrics.
package sink

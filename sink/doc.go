// Package sink defines the enqueue side of a SEDA event queue: the Sink
// interface every stage exposes, admission-control predicates, rejection
// errors, and Queue, the bounded multi-producer/multi-consumer queue that
// backs every stage.
//
// Enqueue is synchronous: a queue accepts an event or rejects it at once with
// an error wrapping ErrRejected (a full queue or a predicate said no) or
// ErrClosed (the stage was destroyed). A rejection is the overload signal the
// caller must react to: drop, degrade, answer 503, or apply back-pressure with
// EnqueueWait.
//
// Handlers only ever see Sink; taking events off a queue (Queue.Dequeue) is
// the runtime's job.
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

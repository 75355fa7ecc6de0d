package sink

import "runtime"

// EachEnqueuer is implemented by sinks that decide a batch of events each
// on its own in one pass: as that many Enqueues would, in order, with the
// same counts, predicate calls and errors, but under one lock and with
// one consumer wake-up for the batch. A remote stage's replica admits the
// events of a combined request (many senders' Enqueues in one message)
// this way.
//
// A sink type that embeds *Queue and overrides Enqueue (to count, trace or
// transform) inherits Queue's EnqueueEach, which bypasses that override:
// such a type must override EnqueueEach as well, or hide it.
type EachEnqueuer interface {
	// EnqueueEach adds each event of es on its own and sets errs[i] to
	// es[i]'s verdict: nil if it was added, else the error Enqueue would
	// have returned. errs must be at least as long as es. It returns how
	// many were added.
	EnqueueEach(es []Event, errs []error) int
}

var _ EachEnqueuer = (*Queue)(nil)

// EnqueueEach adds each event of es on its own, as Enqueue does
// (EachEnqueuer); the events it adds are pushed, never handed to a parked
// consumer one by one, and one consumer is woken for all of them.
func (q *Queue) EnqueueEach(es []Event, errs []error) int {
	errs = errs[:len(es)]
	added := 0
	q.mu.Lock()
	for i, e := range es {
		b, err := q.decideLocked(e)
		if errs[i] = err; err != nil {
			continue
		}
		q.enqueued++
		q.push(e, q.stampLocked(b))
		added++
	}
	if added == 0 {
		q.mu.Unlock()
		return 0
	}
	q.unlockPushed()
	return added
}

// unlockPushed releases q.mu once events were pushed, wakes one consumer,
// and yields the processor if an unbounded queue grew long (softBound).
func (q *Queue) unlockPushed() {
	w := q.popWaiterLocked()
	long := q.count > softBound && q.capacity.Load() <= 0
	q.mu.Unlock()
	q.wake(w)
	if long {
		runtime.Gosched()
	}
}

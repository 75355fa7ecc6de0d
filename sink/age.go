package sink

import (
	"sync/atomic"
	"time"
)

// ageLimit is a queue's age limit (JOBS's max_time): events that waited
// longer are removed before handling by the runtime (Expire), counted and
// given back to the predicate that admitted them. While a limit is set
// every event is stamped on entry.
type ageLimit struct {
	max     atomic.Int64 // ns; 0: none
	expired atomic.Uint64
}

// on reports whether every event must be stamped.
func (a *ageLimit) on() bool { return a.max.Load() > 0 }

// SetMaxAge sets the queue's age limit: Expire removes events that waited
// longer than d. d <= 0 removes the limit.
func (q *Queue) SetMaxAge(d time.Duration) { q.age.max.Store(max(int64(d), 0)) }

// MaxAge returns the queue's age limit, or 0.
func (q *Queue) MaxAge() time.Duration { return time.Duration(q.age.max.Load()) }

// Expired returns how many events Expire removed.
func (q *Queue) Expired() uint64 { return q.age.expired.Load() }

// Expire is called by the runtime on a batch it dequeued (events and their
// entry stamps from Dequeue) before handling it, at time now (Nanotime).
// It moves the events that waited longer than the age limit to the end of
// the batch, keeping the order of the others, and returns how many are
// kept: events[:kept] are to be handled, events[kept:] expired. Expired
// events are counted (Expired) and cancelled on the predicate that
// admitted them (Canceler), as they will never complete; the caller still
// calls Finish for the whole batch. Unstamped events (stamp 0) never
// expire; without a limit Expire returns len(events).
func (q *Queue) Expire(events []Event, stamps []int64, now int64) (kept int) {
	limit := q.age.max.Load()
	if limit <= 0 {
		return len(events)
	}
	var expired []Event
	var expStamps []int64
	for i, e := range events {
		if s := stamps[i]; s != 0 && now-s > limit {
			expired = append(expired, e)
			expStamps = append(expStamps, s)
			continue
		}
		events[kept], stamps[kept] = e, stamps[i]
		kept++
	}
	if len(expired) == 0 {
		return kept
	}
	copy(events[kept:], expired)
	copy(stamps[kept:], expStamps)
	q.age.expired.Add(uint64(len(expired)))
	for i, e := range expired {
		q.cancelAt(e, expStamps[i])
	}
	return kept
}

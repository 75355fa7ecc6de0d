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
	shed    atomic.Uint64
}

// Shedder is implemented by predicates that also shed events already
// queued (CoDel's dequeue-side drop): the runtime asks, through
// Queue.Expire, for each dequeued event before handling it, how long it
// waited; true means drop it. Every Shedder of the installed predicate's
// tree is asked (a CoDel inside a composite sheds too).
type Shedder interface {
	Shed(e Event, waited time.Duration) bool
}

// on reports whether every event must be stamped.
func (a *ageLimit) on() bool { return a.max.Load() > 0 }

// SetMaxAge sets the queue's age limit: Expire removes events that waited
// longer than d. d <= 0 removes the limit.
func (q *Queue) SetMaxAge(d time.Duration) { q.age.max.Store(max(int64(d), 0)) }

// MaxAge returns the queue's age limit, or 0.
func (q *Queue) MaxAge() time.Duration { return time.Duration(q.age.max.Load()) }

// Expired returns how many events Expire removed for their age.
func (q *Queue) Expired() uint64 { return q.age.expired.Load() }

// Shed returns how many events Expire removed because the predicate (a
// Shedder) shed them.
func (q *Queue) Shed() uint64 { return q.age.shed.Load() }

// Sheds reports whether Expire may remove events: an age limit is set or
// the predicate is a Shedder.
func (q *Queue) sheds() bool {
	if q.age.on() {
		return true
	}
	b := q.adm.box.Load()
	return b != nil && len(b.shed) > 0
}

// Expire is called by the runtime on a batch it dequeued (events and their
// entry stamps from Dequeue) before handling it, at time now (Nanotime).
// It moves the events that waited longer than the age limit, or that the
// predicate (a Shedder) sheds, to the end of the batch, keeping the order
// of the others, and returns how many are kept: events[:kept] are to be
// handled, events[kept:] are removed. Removed events are counted (Expired,
// Shed) and cancelled on the predicate that admitted them (Canceler), as
// they will never complete; the caller still calls Finish for the whole
// batch. Unstamped events (stamp 0) are never removed.
func (q *Queue) expire(events []Event, stamps []int64, now int64) (kept int) {
	limit := q.age.max.Load()
	var shedder *admBox // nil: the predicate sheds nothing
	if b := q.adm.box.Load(); b != nil && len(b.shed) > 0 {
		shedder = b
	}
	if limit <= 0 && shedder == nil {
		return len(events)
	}
	var removed []Event
	var remStamps []int64
	var expired, shed uint64
	for i, e := range events {
		if s := stamps[i]; s != 0 {
			switch waited := now - s; {
			case limit > 0 && waited > limit:
				expired++
			case shedder != nil && shedder.sheds(e, time.Duration(waited)):
				shed++
			default:
				events[kept], stamps[kept] = e, s
				kept++
				continue
			}
			removed = append(removed, e)
			remStamps = append(remStamps, s)
			continue
		}
		events[kept], stamps[kept] = e, stamps[i]
		kept++
	}
	if len(removed) == 0 {
		return kept
	}
	copy(events[kept:], removed)
	copy(stamps[kept:], remStamps)
	q.age.expired.Add(expired)
	q.age.shed.Add(shed)
	for i, e := range removed {
		q.cancelAt(e, remStamps[i])
	}
	return kept
}

package stage

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
)

// Dispatch rate (`queue: {dispatch: 100, burst: 10}`, JOBS's queueing
// regulator): the runtime waits for the rate before handing a batch to the
// handler. Queue age limit (`queue: {max_time: 2s}`, JOBS's max_time) and
// dequeue-side shedding (a sink.Shedder predicate, e.g. CoDel): the runtime
// hands a dequeued batch to expire before the handler; events that waited
// longer than the limit, or that the predicate sheds, are not handled. They are counted (the queue's
// Expired, metric "<stage>.expired"), cancelled on the predicate that
// admitted them, released on keyed stages, and logged at Warn level (at
// most once a second per stage, with the count since the last line).

// ageReport rate-limits the expiry log of a stage.
type ageReport struct {
	mu      sync.Mutex
	last    time.Time
	pending int
}

// expire removes the events of a dequeued batch that waited longer than
// the queue's max_time or that its predicate sheds, and returns the events to handle (a prefix of
// events, with their stamps).
func (s *Stage) expire(events []sink.Event, stamps []int64) ([]sink.Event, []int64) {
	kept := s.queue.Expire(events, stamps, sink.Nanotime())
	if kept == len(events) {
		return events, stamps
	}
	dead := events[kept:]
	if s.keyed {
		s.queue.Release(dead)
	}
	s.age.mu.Lock()
	s.age.pending += len(dead)
	now := time.Now()
	var n int
	if now.Sub(s.age.last) >= time.Second {
		n, s.age.pending, s.age.last = s.age.pending, 0, now
	}
	s.age.mu.Unlock()
	if n > 0 {
		s.mgr.log.Warn("events expired in queue", "stage", s.name, "count", n,
			"max_time", s.queue.MaxAge(), "expired", s.queue.Expired(), "shed", s.queue.Shed())
	}
	return events[:kept], stamps[:kept]
}

// checkMaxTime validates queue.max_time, queue.dispatch and queue.burst.
func checkMaxTime(q QueueConfig) *problem {
	switch {
	case q.MaxTime < 0:
		return &problem{[]string{"queue", "max_time"}, "negative duration " + q.MaxTime.String()}
	case q.Dispatch < 0 || q.Dispatch != q.Dispatch || q.Dispatch > 1e9:
		return &problem{[]string{"queue", "dispatch"}, fmt.Sprintf("dispatch rate must be in [0, 1e9] events/s, got %v", q.Dispatch)}
	case q.Burst < 0:
		return &problem{[]string{"queue", "burst"}, fmt.Sprintf("negative burst %d", q.Burst)}
	case q.Burst > 0 && q.Dispatch == 0:
		return &problem{[]string{"queue", "burst"}, "burst needs a dispatch rate"}
	}
	return nil
}

// newPacer returns the queue's dispatch regulator, or nil.
func newPacer(q QueueConfig) *enqueuepred.Pacer {
	if q.Dispatch <= 0 {
		return nil
	}
	p, err := enqueuepred.NewPacer(enqueuepred.PacerConfig{Rate: q.Dispatch, Depth: q.Burst})
	if err != nil {
		return nil // unreachable after checkMaxTime
	}
	return p
}

// beforeBatch applies the queue's age limit and shedding, then waits for
// the dispatch rate (JOBS's queueing regulator: the events wait, in the
// queue or in this worker, instead of being refused). It returns the
// events to handle.
func (s *Stage) beforeBatch(events []sink.Event, stamps []int64) ([]sink.Event, []int64) {
	if s.queue.Sheds() {
		if events, stamps = s.expire(events, stamps); len(events) == 0 {
			return events, stamps
		}
	}
	if s.pacer != nil {
		ctx := s.mgr.runContext()
		if ctx == nil {
			ctx = context.Background()
		}
		_ = s.pacer.Wait(ctx, len(events)) // manager ending: handle without waiting
	}
	return events, stamps
}

// Pacer returns the stage's dispatch regulator (queue.dispatch), or nil.
func (s *Stage) Pacer() *enqueuepred.Pacer { return s.pacer }

// Shed returns how many of the stage's queued events its predicate shed
// before handling (a sink.Shedder such as codel with shed: true).
func (s *Stage) Shed() uint64 { return s.queue.Shed() }

// Expired returns how many of the stage's events were removed unhandled
// because they waited longer than queue.max_time.
func (s *Stage) Expired() uint64 { return s.queue.Expired() }

// dispatchPacer keeps stage.go free of the enqueuepred import.
type dispatchPacer = enqueuepred.Pacer

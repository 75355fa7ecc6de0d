package stage

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/internal/clock"
	"github.com/sandstorm-go/sandstorm/sink"
)

// Dispatch rate (`queue: {dispatch: 100, burst: 10}`, JOBS's queueing
// regulator): a token bucket of that rate and depth; the runtime hands the
// handler batches of at most burst events, each event once it has its
// token (runPaced). Queue age limit (`queue: {max_time: 2s}`, JOBS's max_time) and
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

// newPacer returns the queue's dispatch regulator on clock now (nil:
// time.Now), or nil.
func newPacer(q QueueConfig, now func() time.Time) *enqueuepred.Pacer {
	if q.Dispatch <= 0 {
		return nil
	}
	p, err := enqueuepred.NewPacer(enqueuepred.PacerConfig{Rate: q.Dispatch, Depth: q.Burst, Now: now})
	if err != nil {
		return nil // unreachable after checkMaxTime
	}
	return p
}

// runPaced hands a batch to the handler as the dispatch regulator lets
// its events go (JOBS's queueing regulator: the events wait, in the queue
// or in this worker, instead of being refused). The regulator is a token
// bucket of rate queue.dispatch and depth queue.burst, which bounds the
// batch too (runtimeView.BatchSize): the events that have a token go at
// once, as one batch; the next waits for its token, and goes with those
// whose tokens have come meanwhile. Once the burst is spent, at 200/s,
// that is a batch of one event every 5 ms. After a wait the queue's age
// limit (max_time) and shedding apply again. When the manager ends the
// events go without waiting.
func (s *Stage) runPaced(events, scratch []sink.Event, stamps []int64) {
	start, waited := 0, false
	for i := range events {
		d := s.pacer.Reserve(1)
		if d <= 0 {
			continue
		}
		due := s.mgr.now().Add(d)
		if i > start {
			s.runChunk(events[start:i], scratch[start:i], stamps[start:i], waited)
		}
		s.waitUntil(due)
		start, waited = i, true
	}
	if start < len(events) {
		s.runChunk(events[start:], scratch[start:], stamps[start:], waited)
	}
}

// runChunk runs part of a paced batch, applying the age limit and
// shedding again if it waited for the rate.
func (s *Stage) runChunk(events, scratch []sink.Event, stamps []int64, waited bool) {
	if waited && s.queue.Sheds() {
		if events, stamps = s.expire(events, stamps); len(events) == 0 {
			return
		}
	}
	s.runNow(events, scratch, stamps)
}

// waitUntil waits until due on the manager's clock (Options.Now and
// After), or until the manager ends.
func (s *Stage) waitUntil(due time.Time) {
	d := due.Sub(s.mgr.now())
	if d <= 0 {
		return
	}
	ctx := s.mgr.runContext()
	if ctx == nil {
		ctx = context.Background()
	}
	if after := s.mgr.opts.After; after != nil {
		select {
		case <-after(d):
		case <-ctx.Done():
		}
		return
	}
	clock.Sleep(ctx, d)
}

// now reads the manager's clock (Options.Now).
func (m *Manager) now() time.Time {
	if m.opts.Now != nil {
		return m.opts.Now()
	}
	return time.Now()
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

package stage

import (
	"context"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// ContextEvent is an event that carries the context of the work it belongs
// to (Request is one). The runtime drops such an event unhandled when its
// context has ended before its stage takes it up: the caller has given up
// (timed out, disconnected), so the work would be wasted. Each drop is
// counted (Stats.Expired) and logged at debug level; a Request dropped this
// way is answered with an error wrapping ErrCallAbandoned. Once a handler
// has the event, ending the context is the handler's business.
type ContextEvent interface {
	Context() context.Context
}

// ExpiredEvent is a ContextEvent told when the runtime drops it for its
// ended context, so that its owner lets go at once of what it holds for
// it rather than waiting for an answer that will not come: an
// http.Request answers its connection, which frees a reset HTTP/2
// stream's slot (and answers 503 on a connection still open). Expired
// runs on the worker that dropped the event, after it was counted and
// completed on its predicate; it must not block.
type ExpiredEvent interface {
	ContextEvent
	Expired(stage string)
}

// ContextSetter is a ContextEvent whose context the stage holding it may
// replace with one derived from it (keeping its deadline, cancellation and
// values): middleware such as otelstage sets the context of the stage
// visit's span, so that what the handler starts, and the stages it
// enqueues the event on, are children of that span. Request is one. An
// event belongs to one stage at a time (the queue hands it over), so the
// setter is called by its current holder only, and never after the
// handler has passed the event on. It changes the event in place rather
// than returning a copy (as net/http's WithContext does) because the
// runtime, the predicates and the caller of a Request know the event by
// its identity.
type ContextSetter interface {
	ContextEvent
	SetContext(ctx context.Context)
}

// dropExpired removes from a batch, in place and keeping the order, the
// events whose context has ended, with their stamps, and returns the
// shortened batch. Each dropped event is counted, answered if it is a
// Request, completed on the predicate that admitted it (it held a credit),
// released from its key on a keyed stage, and told if it is an
// ExpiredEvent. It is the worker loop's one
// hook for expiry: Stage.runBatch calls it before handling a batch.
func (s *Stage) dropExpired(events []sink.Event, stamps []int64) ([]sink.Event, []int64) {
	n := 0
	for i, e := range events {
		ce, ok := e.(ContextEvent)
		if !ok || ce.Context() == nil || ce.Context().Err() == nil {
			if n != i {
				events[n], stamps[n] = e, stamps[i]
			}
			n++
			continue
		}
		s.expired.Add(1)
		s.mgr.log.Debug("stage dropped an event whose context had ended", "stage", s.name, "err", ce.Context().Err())
		if c, ok := e.(call); ok {
			c.expire(s.name)
		}
		if c := s.queue.CompleterAt(stamps[i]); c != nil {
			var queued time.Duration
			if stamps[i] != 0 {
				queued = time.Duration(sink.Nanotime() - stamps[i])
			}
			c.Done(e, queued, 0)
		}
		if s.keyed {
			s.queue.Release([]sink.Event{e})
		}
		if x, ok := e.(ExpiredEvent); ok {
			x.Expired(s.name)
		}
	}
	if n < len(events) {
		clear(events[n:])
	}
	return events[:n], stamps[:n]
}

package enqueuepred

import (
	"fmt"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// eventFed is implemented by samplers fed by the guarded stage's own
// events (JOBS: samplers triggered by events), not only polled: a modified
// regulator passes them every arrival it decides on (Arrived, admitted or
// not) and every completion (Completed, from sink.Done); Sample then
// reports what the events since the previous sample showed.
type eventFed interface {
	Sampler
	Arrived(e sink.Event)
	Completed(e sink.Event, queued, service time.Duration)
}

// eventKind selects what an eventSampler measures.
type eventKind int

const (
	// kindArrivals: events offered per second (admitted or not).
	kindArrivals eventKind = iota
	// kindService: mean handler time of the completions, in milliseconds.
	kindService
	// kindWait: mean time the completed events waited in the queue, in
	// milliseconds.
	kindWait
)

// eventSampler is an event-fed sampler of the guarded stage's arrivals,
// service times or queue waits. With no completion since the previous
// sample, kindService and kindWait return an error wrapping errNoSample
// (the modifier keeps its degree).
type eventSampler struct {
	Kind eventKind

	mu       sync.Mutex
	arrivals uint64
	n        uint64
	sum      time.Duration
	last     time.Time
}

var _ eventFed = (*eventSampler)(nil)

// newEventSampler returns an event-fed sampler.
func newEventSampler(k eventKind) *eventSampler { return &eventSampler{Kind: k} }

// Name implements Sampler.
func (s *eventSampler) Name() string {
	switch s.Kind {
	case kindArrivals:
		return "arrivals"
	case kindService:
		return "service"
	case kindWait:
		return "wait"
	}
	return fmt.Sprintf("EventKind(%d)", int(s.Kind))
}

// Arrived implements eventFed.
func (s *eventSampler) Arrived(sink.Event) {
	if s.Kind != kindArrivals {
		return
	}
	s.mu.Lock()
	s.arrivals++
	s.mu.Unlock()
}

// Completed implements eventFed.
func (s *eventSampler) Completed(_ sink.Event, queued, service time.Duration) {
	if s.Kind == kindArrivals {
		return
	}
	s.mu.Lock()
	s.n++
	if s.Kind == kindService {
		s.sum += service
	} else {
		s.sum += queued
	}
	s.mu.Unlock()
}

// Sample implements Sampler.
func (s *eventSampler) Sample(now time.Time) (float64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.last
	s.last = now
	switch s.Kind {
	case kindArrivals:
		n := s.arrivals
		s.arrivals = 0
		if last.IsZero() || !now.After(last) {
			return 0, fmt.Errorf("%w: arrivals need two samples", errNoSample)
		}
		return float64(n) / now.Sub(last).Seconds(), nil
	default:
		n, sum := s.n, s.sum
		s.n, s.sum = 0, 0
		if n == 0 {
			return 0, fmt.Errorf("%w: no completion since the last sample", errNoSample)
		}
		return float64(sum) / float64(n) / 1e6, nil
	}
}

package enqueuepred

import (
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
	"github.com/sandstorm-go/sandstorm/sink"
)

// Saturated composes admission control with the thread-pool controller
// (thesis §8.2.1): while the stage has fewer than Threads events in
// service, its pool can still grow (the thread-pool controller adds
// goroutines on a long queue) and every event is admitted; from Threads
// on, the wrapped predicate decides. Set Threads to the stage's
// threadpool.max. Events admitted while the pool can grow are charged to
// the wrapped predicate (Charger), so its later Done or Cancel balances.
// The number in service is read from the bound queue (sink.Queue's
// InService); bound to anything else, the wrapped predicate always
// decides.
type Saturated struct {
	counts
	inner   sink.Predicate
	threads int
	q       atomic.Pointer[sinkBox]
}

var (
	_ sink.Completer = (*Saturated)(nil)
	_ sink.Canceler  = (*Saturated)(nil)
	_ sink.Binder    = (*Saturated)(nil)
	_ Charger        = (*Saturated)(nil)
	_ Composite      = (*Saturated)(nil)
)

// NewSaturated returns inner applied only once threads events are in
// service.
func NewSaturated(inner sink.Predicate, threads int) *Saturated {
	return &Saturated{inner: inner, threads: max(threads, 1)}
}

// Name implements sink.Namer.
func (s *Saturated) Name() string { return "saturated" }

// Children implements Composite.
func (s *Saturated) Children() []sink.Predicate { return []sink.Predicate{s.inner} }

// CanGrow reports whether fewer than Threads events are in service.
func (s *Saturated) CanGrow() bool { return s.canGrow(false) }

// canGrow is CanGrow; locked says the guarded queue's lock is held, as it
// is while the queue runs Accept.
func (s *Saturated) canGrow(locked bool) bool {
	b := s.q.Load()
	if b == nil {
		return false
	}
	switch q := b.s.(type) {
	case *sink.Queue:
		if locked {
			return sinkrt.Of(q).InServiceLocked() < s.threads
		}
		return sinkrt.Of(q).InService() < s.threads
	case interface{ InService() int }:
		return q.InService() < s.threads
	}
	return false
}

// Accept implements sink.Predicate.
func (s *Saturated) Accept(e sink.Event) bool {
	if s.canGrow(true) {
		Charge(s.inner, e)
		return s.yes()
	}
	if s.inner.Accept(e) {
		return s.yes()
	}
	return s.no()
}

// Charge implements Charger.
func (s *Saturated) Charge(e sink.Event) {
	Charge(s.inner, e)
	s.accepted.Add(1)
}

// Done implements sink.Completer.
func (s *Saturated) Done(e sink.Event, queued, service time.Duration) {
	sink.Done(s.inner, e, queued, service)
}

// Cancel implements sink.Canceler.
func (s *Saturated) Cancel(e sink.Event) { sink.Cancel(s.inner, e) }

// Bind implements sink.Binder.
func (s *Saturated) Bind(q sink.Sink) {
	if q == nil {
		s.q.Store(nil)
	} else {
		s.q.Store(&sinkBox{q})
	}
	if b, ok := s.inner.(sink.Binder); ok {
		b.Bind(q)
	}
}

// Inspect implements Inspector.
func (s *Saturated) Inspect(report func(string, float64)) {
	g := 0.0
	if s.CanGrow() {
		g = 1
	}
	report("can_grow", g)
	s.inspect(report)
	Inspect(s.inner, prefixed("0."+sink.PredicateName(s.inner)+".", report))
}

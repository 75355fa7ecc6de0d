package enqueuepred

import (
	"sync/atomic"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
	"github.com/sandstorm-go/sandstorm/sink"
)

// PoolState is the thread pool serving the queue a NewSaturated predicate
// guards, as far as it needs it: whether the pool can still grow.
// *threadpool.Pool implements it. Both methods are called on the enqueue
// path with the guarded queue's lock held: they must be cheap, and must
// neither block nor call into the queue.
type PoolState interface {
	// Size is the number of workers now.
	Size() int
	// Limit is the most workers the pool may grow to now: its maximum, or
	// the lower limit its controller set (the SEDA controller's thrashing
	// detection); its size when it never resizes.
	Limit() int
}

// saturated composes admission control with the thread-pool controller
// (thesis §8.2.1): the wrapped predicate decides only once the stage's
// pool cannot grow any more and none of its workers is idle. Until then
// every event is admitted and charged to the wrapped predicate (charger),
// so that its later Done or Cancel balances.
//
// Bound to a pool (BindPool; package stage binds a stage's own pool), the
// pool can grow while its Size is below its Limit, and a worker is idle
// while one is parked on the guarded queue (sink.Queue). Threads is then
// ignored.
//
// Without a pool (a bare sink.Queue, or a stage on the shared pool, whose
// size is fixed), Threads, if above zero, stands in for it: the wrapped
// predicate decides once Threads events are in service (sink.Queue's
// count of events taken out and not finished, or the bound sink's
// InService method). That counts events, not workers: a worker holding a
// batch holds several. With Threads 0 and no pool, the wrapped predicate
// always decides.
type saturated struct {
	counts
	inner   sink.Predicate
	kids    []sink.Predicate // inner, for Children
	threads int              // 0: none
	q       atomic.Pointer[sinkBox]
	pool    atomic.Pointer[poolBox]
}

type poolBox struct{ p PoolState }

var (
	_ sink.Binder    = (*saturated)(nil)
	_ charger        = (*saturated)(nil)
	_ sink.Composite = (*saturated)(nil)
)

// NewSaturated composes admission control with the thread-pool controller
// (thesis §8.2.1, YAML `saturated`): it returns inner applied only once the
// pool bound with its BindPool(PoolState) method (package stage binds a
// stage's own pool) cannot grow and has no idle worker or, with no pool bound,
// once threads events are in service (threads ≤ 0: inner always decides
// then).
func NewSaturated(inner sink.Predicate, threads int) sink.Predicate {
	return newSaturated(inner, threads)
}

// newSaturated is NewSaturated, returning the concrete type.
func newSaturated(inner sink.Predicate, threads int) *saturated {
	return &saturated{inner: inner, kids: []sink.Predicate{inner}, threads: max(threads, 0)}
}

// Name implements sink.Namer.
func (s *saturated) Name() string { return "saturated" }

// Children implements sink.Composite: the inner predicate.
func (s *saturated) Children() []sink.Predicate { return s.kids }

// BindPool makes s follow pool, the thread pool serving the queue it
// guards; nil unbinds it (Threads applies again).
func (s *saturated) BindPool(pool PoolState) {
	if pool == nil {
		s.pool.Store(nil)
	} else {
		s.pool.Store(&poolBox{pool})
	}
}

// CanGrow reports whether admission control is off now: the bound pool
// can still grow or has an idle worker (with no pool, fewer than Threads
// events are in service).
func (s *saturated) CanGrow() bool { return s.canGrow(false) }

// canGrow is CanGrow; locked says the guarded queue's lock is held, as it
// is while the queue runs Accept.
func (s *saturated) canGrow(locked bool) bool {
	b := s.q.Load()
	if pb := s.pool.Load(); pb != nil {
		if pb.p.Size() < pb.p.Limit() {
			return true
		}
		return b != nil && parked(b.s, locked) > 0
	}
	if b == nil || s.threads == 0 {
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

// parked returns the number of workers parked on q, a *sink.Queue (0 for
// any other sink).
func parked(q sink.Sink, locked bool) int {
	sq, ok := q.(*sink.Queue)
	if !ok {
		return 0
	}
	if locked {
		return sinkrt.Of(sq).ParkedLocked()
	}
	return sinkrt.Of(sq).Parked()
}

// Accept implements sink.Predicate.
func (s *saturated) Accept(e sink.Event) bool {
	if s.canGrow(true) {
		charge(s.inner, e)
		return s.yes()
	}
	if s.inner.Accept(e) {
		return s.yes()
	}
	return s.no()
}

// charge implements charger.
func (s *saturated) charge(e sink.Event) {
	charge(s.inner, e)
	s.accepted.Add(1)
}

// Bind implements sink.Binder: s reads the guarded queue. (The inner
// predicate is bound by the sink, through sink.Composite.)
func (s *saturated) Bind(q sink.Sink) {
	if q == nil {
		s.q.Store(nil)
	} else {
		s.q.Store(&sinkBox{q})
	}
}

// Inspect implements Inspector.
func (s *saturated) Inspect(report func(string, float64)) {
	g := 0.0
	if s.CanGrow() {
		g = 1
	}
	report("can_grow", g)
	s.inspect(report)
	inspect(s.inner, prefixed("0."+sink.PredicateName(s.inner)+".", report))
}

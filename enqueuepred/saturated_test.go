package enqueuepred

import (
	"testing"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
	"github.com/sandstorm-go/sandstorm/sink"
)

// inService is a sink whose events in service the test sets.
type inService struct {
	sink.Sink
	n int
}

func (s *inService) Len() int       { return 0 }
func (s *inService) InService() int { return s.n }

func TestSaturated(t *testing.T) {
	c := newCounter(1)
	s := newSaturated(c, 4)
	q := &inService{n: 3}
	sink.Bind(s, q)
	// The pool can still grow: everything admitted, charged to the counter.
	if count(s, ev{}, 3) != 3 || c.InFlight() != 3 {
		t.Fatalf("in flight %d", c.InFlight())
	}
	// Four in service: the counter (limit 1, 3 in flight) decides.
	q.n = 4
	if s.Accept(ev{}) {
		t.Fatal("admitted with the pool full and the counter over its limit")
	}
	for range 3 {
		sink.Done(s, ev{}, 0, 0)
	}
	if !s.Accept(ev{}) || s.Accept(ev{}) {
		t.Fatal("counter not deciding once the pool is full")
	}
	if m := inspectMap(s); m["can_grow"] != 0 || m["rejected"] != 2 || m["0.counter.inflight"] != 1 {
		t.Fatalf("inspect %v", m)
	}
	// Unbound: the wrapped predicate always decides.
	if newSaturated(newCounter(0), 4).Accept(ev{}) {
		t.Fatal("unbound: admitted past a zero counter")
	}
}

// Bound to a real queue, Saturated counts the events the runtime has
// taken out and not finished.
func TestSaturatedOnQueue(t *testing.T) {
	q := sink.NewQueue(0)
	q.SetPredicate(newSaturated(sink.PredicateFunc(func(sink.Event) bool { return false }), 1))
	if err := q.Enqueue(1); err != nil {
		t.Fatalf("nothing in service, yet refused: %v", err)
	}
	rt := sinkrt.Of(q)
	if n := q.Dequeue(make([]sink.Event, 1), nil); n != 1 {
		t.Fatalf("dequeued %d", n)
	}
	if err := q.Enqueue(2); err == nil {
		t.Fatal("admitted with the pool saturated and the inner predicate refusing")
	}
	rt.Finish(1)
	if err := q.Enqueue(3); err != nil {
		t.Fatalf("refused once the event finished: %v", err)
	}
}

// fakePool is a PoolState the test sets.
type fakePool struct{ size, limit int }

func (p fakePool) Size() int  { return p.size }
func (p fakePool) Limit() int { return p.limit }

// Bound to a pool, Saturated lets the wrapped predicate decide only once
// the pool cannot grow (its size at its limit) and no worker is parked on
// the queue; the number of events in service and Threads no longer
// matter.
func TestSaturatedFollowsPool(t *testing.T) {
	refuse := sink.PredicateFunc(func(sink.Event) bool { return false })
	for _, tc := range []struct {
		name      string
		pool      PoolState // nil: none bound
		threads   int
		inService int // events a worker holds
		parked    int // workers parked on the queue
		admitted  bool
	}{
		// One worker holding a batch of 10, pool at 1 of max 4: the old
		// rule (10 in service ≥ threads 4) refused.
		{"can grow", fakePool{size: 1, limit: 4}, 4, 10, 0, true},
		{"at max", fakePool{size: 4, limit: 4}, 4, 4, 0, false},
		// Thrashing detection holds the pool at 2 of max 4: the old rule
		// (2 in service < threads 4) never refused.
		{"at thrash limit", fakePool{size: 2, limit: 2}, 4, 2, 0, false},
		{"above a lowered limit", fakePool{size: 4, limit: 3}, 0, 3, 0, false},
		{"at max, a worker idle", fakePool{size: 4, limit: 4}, 4, 3, 1, true},
		{"at max, two workers idle", fakePool{size: 4, limit: 4}, 0, 2, 2, true},
		{"not started", fakePool{size: 0, limit: 4}, 0, 0, 0, true},
		{"no pool, threads", nil, 4, 3, 0, true},
		{"no pool, threads reached", nil, 4, 4, 0, false},
		{"no pool, no threads", nil, 0, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := sink.NewQueue(0)
			rt := sinkrt.Of(q)
			for i := range tc.inService {
				if err := q.Enqueue(i); err != nil {
					t.Fatal(err)
				}
			}
			if n := q.Dequeue(make([]sink.Event, tc.inService), nil); n != tc.inService {
				t.Fatalf("dequeued %d", n)
			}
			select {
			case <-q.Ready(): // the enqueues' wake-up token
			default:
			}
			for range tc.parked {
				if !rt.Enlist(sinkrt.NewWaiter()) {
					t.Fatal("could not park a worker")
				}
			}
			s := newSaturated(refuse, tc.threads)
			if tc.pool != nil {
				s.BindPool(tc.pool)
			}
			q.SetPredicate(s)
			if got := s.CanGrow(); got != tc.admitted {
				t.Errorf("CanGrow %v, want %v", got, tc.admitted)
			}
			if err := q.Enqueue("e"); (err == nil) != tc.admitted {
				t.Errorf("Enqueue: %v, want admitted %v", err, tc.admitted)
			}
		})
	}
}

// BindPool(nil) unbinds the pool: Threads decides again.
func TestSaturatedUnbindPool(t *testing.T) {
	q := &inService{n: 1}
	s := newSaturated(newCounter(0), 2)
	sink.Bind(s, q)
	s.BindPool(fakePool{size: 4, limit: 4})
	if s.Accept(ev{}) {
		t.Fatal("admitted with the pool at its limit and a zero counter")
	}
	s.BindPool(nil)
	if !s.Accept(ev{}) {
		t.Fatal("refused with 1 of threads 2 in service and no pool")
	}
}

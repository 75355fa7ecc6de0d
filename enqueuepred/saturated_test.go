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
	c := NewCounter(1)
	s := NewSaturated(c, 4)
	q := &inService{n: 3}
	s.Bind(q)
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
		s.Done(ev{}, 0, 0)
	}
	if !s.Accept(ev{}) || s.Accept(ev{}) {
		t.Fatal("counter not deciding once the pool is full")
	}
	if m := inspectMap(s); m["can_grow"] != 0 || m["rejected"] != 2 || m["0.counter.inflight"] != 1 {
		t.Fatalf("inspect %v", m)
	}
	// Unbound: the wrapped predicate always decides.
	if NewSaturated(NewCounter(0), 4).Accept(ev{}) {
		t.Fatal("unbound: admitted past a zero counter")
	}
}

// Bound to a real queue, Saturated counts the events the runtime has
// taken out and not finished.
func TestSaturatedOnQueue(t *testing.T) {
	q := sink.NewQueue(0)
	q.SetPredicate(NewSaturated(sink.PredicateFunc(func(sink.Event) bool { return false }), 1))
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

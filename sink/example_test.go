package sink_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

func ExampleQueue_Prepare() {
	// All-or-nothing enqueue across two queues (thesis Fig. 27).
	q1, q2 := sink.NewQueue(10), sink.NewQueue(1)
	events := []sink.Event{"a", "b"}
	t1, err := q1.Prepare(events)
	if err != nil {
		fmt.Println("q1 refused:", err)
		return
	}
	t2, err := q2.Prepare(events)
	if err != nil {
		t1.Abort()
		fmt.Println("q2 refused:", errors.Is(err, sink.ErrRejected))
		fmt.Println("q1 holds", q1.Len())
		return
	}
	t1.Commit()
	t2.Commit()
	// Output:
	// q2 refused: true
	// q1 holds 0
}

func ExampleQueue_SetPredicate() {
	q := sink.NewNamedQueue("Greeter", 0)
	q.SetPredicate(sink.PredicateFunc(func(e sink.Event) bool { return e != "spam" }))
	fmt.Println(q.Enqueue("hello"))
	fmt.Println(q.Enqueue("spam"))
	// Output:
	// <nil>
	// sink "Greeter": enqueue rejected by predicate sink.PredicateFunc: admission refused
}

// conn is a sink that is not a queue (a connection, a remote sender): it
// holds its admission control in a sink.Admission.
type conn struct {
	adm sink.Admission
	out []held // events kept until written
}

// held is an admitted event and the Ticket that completes it.
type held struct {
	e      sink.Event
	ticket sink.Ticket
}

func (c *conn) String() string                { return "conn 1" }
func (c *conn) SetPredicate(p sink.Predicate) { c.adm.SetPredicate(c, p) }
func (c *conn) Predicate() sink.Predicate     { return c.adm.Predicate() }

func (c *conn) Enqueue(e sink.Event) error {
	t, err := c.adm.Admit(e)
	if err != nil {
		return err // a *sink.RejectError wrapping sink.ErrRejected
	}
	if len(c.out) == 2 {
		t.Cancel(e) // not kept after all: the predicate gets its credit back
		return &sink.RejectError{Sink: c.String(), Reason: "output full"}
	}
	c.out = append(c.out, held{e, t})
	return nil
}

func (c *conn) EnqueueMany(es []sink.Event) error {
	t, err := c.adm.AdmitMany(es)
	if err != nil {
		return err
	}
	if len(c.out)+len(es) > 2 {
		for _, e := range es {
			t.Cancel(e)
		}
		return &sink.RejectError{Sink: c.String(), Reason: "output full"}
	}
	for _, e := range es {
		c.out = append(c.out, held{e, t})
	}
	return nil
}

func (c *conn) EnqueueLossy(e sink.Event) bool { return c.Enqueue(e) == nil }
func (c *conn) Len() int                       { return len(c.out) }

// Prepare is not supported by this sink: it refuses every transaction.
func (c *conn) Prepare([]sink.Event) (sink.Txn, error) {
	return nil, &sink.RejectError{Sink: c.String(), Reason: "no transactions"}
}

// flush "writes" the held events and completes each exactly once.
func (c *conn) flush() {
	for _, h := range c.out {
		h.ticket.Done(h.e, 0, time.Millisecond)
	}
	c.out = c.out[:0]
}

// inFlight is a concurrency limit of one event at a time.
type inFlight struct{ n int }

func (p *inFlight) Accept(sink.Event) bool {
	if p.n == 1 {
		return false
	}
	p.n++
	return true
}
func (p *inFlight) Done(sink.Event, time.Duration, time.Duration) { p.n-- }
func (p *inFlight) Cancel(sink.Event)                             { p.n-- }

func ExampleAdmission() {
	c := &conn{}
	limit := &inFlight{}
	c.SetPredicate(limit)
	fmt.Println(c.Enqueue("a"))
	fmt.Println(c.Enqueue("b"))
	c.flush() // "a" is done: its credit comes back
	fmt.Println(c.Enqueue("b"), limit.n)
	// Output:
	// <nil>
	// sink "conn 1": enqueue rejected by predicate *sink_test.inFlight: admission refused
	// <nil> 1
}

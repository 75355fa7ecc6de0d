package sink_test

import (
	"errors"
	"fmt"

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

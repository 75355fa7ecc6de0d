package sinktest_test

import (
	"fmt"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/sink/sinktest"
)

// A handler hands its batch over; the suite (here the example) handles
// the first event and fails the second.
func ExampleHandoff() {
	h := sinktest.NewHandoff()
	done := make(chan error)
	go func() {
		done <- h.Handle([]sink.Event{"a", "b"}, func(i int) error { return fmt.Errorf("event %d failed", i) })
	}()
	e, _ := h.Consume()
	fmt.Println("handled", e)
	e, _ = h.Fail()
	fmt.Println("failed", e)
	fmt.Println(<-done)
	// Output:
	// handled a
	// failed b
	// event 1 failed
}

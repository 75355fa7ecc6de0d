package sink_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// TestSetCapacity: a lowered bound refuses new events (counted as full)
// while the events already queued past it stay; a raised bound admits
// again and wakes a producer waiting for room.
func TestSetCapacity(t *testing.T) {
	q := sink.NewQueue(8)
	for i := range 6 {
		if err := q.Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	q.SetCapacity(4)
	if q.Capacity() != 4 {
		t.Fatalf("Capacity %d", q.Capacity())
	}
	if err := q.Enqueue(6); !errors.Is(err, sink.ErrRejected) {
		t.Fatalf("enqueue past the lowered bound: %v", err)
	}
	if q.Len() != 6 || q.Stats().RejectedFull != 1 {
		t.Fatalf("len %d, rejected full %d", q.Len(), q.Stats().RejectedFull)
	}
	if err := q.EnqueueMany([]sink.Event{7, 8}); !errors.Is(err, sink.ErrRejected) {
		t.Fatalf("EnqueueMany past the lowered bound: %v", err)
	}

	waited := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
		defer cancel()
		waited <- sink.EnqueueWait(ctx, q, 9)
	}()
	q.SetCapacity(0) // unbounded
	if err := <-waited; err != nil {
		t.Fatalf("the waiting producer: %v", err)
	}
	if err := q.Enqueue(10); err != nil {
		t.Fatal(err)
	}
	if q.Len() != 8 {
		t.Fatalf("len %d, want 8", q.Len())
	}
}

package sink_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

// TestEnqueueEachAsEnqueues: EnqueueEach decides each event as that many
// Enqueues would, in order: the same verdicts (full, refused by the
// predicate, closed, a non-rejectable event past the capacity), the same
// counts, the same events queued in the same order.
func TestEnqueueEachAsEnqueues(t *testing.T) {
	odd := sink.PredicateFunc(func(e sink.Event) bool { n, ok := e.(int); return !ok || n%2 == 0 })
	tests := []struct {
		name      string
		capacity  int
		predicate sink.Predicate
		closed    bool
		queued    int // events enqueued before
		events    []sink.Event
	}{
		{name: "all fit", capacity: 10, events: []sink.Event{1, 2, 3}},
		{name: "unbounded", capacity: 0, events: []sink.Event{1, 2, 3, 4, 5}},
		{name: "past the capacity", capacity: 3, queued: 1, events: []sink.Event{1, 2, 3, 4}},
		{name: "a non-rejectable event past the capacity", capacity: 2, events: []sink.Event{1, 2, nonRejectable("t"), 3}},
		{name: "the predicate refuses some", capacity: 10, predicate: odd, events: []sink.Event{1, 2, 3, 4, 6}},
		{name: "full, then refused by the predicate", capacity: 3, predicate: odd, events: []sink.Event{2, 3, 4, 6, 8}},
		{name: "closed", capacity: 10, closed: true, events: []sink.Event{1, 2}},
		{name: "none", capacity: 10, events: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			each, one := sink.NewNamedQueue("Q", tc.capacity), sink.NewNamedQueue("Q", tc.capacity)
			for _, q := range []*sink.Queue{each, one} {
				q.SetPredicate(tc.predicate)
				for i := range tc.queued {
					if err := q.Enqueue(-2 * (i + 1)); err != nil {
						t.Fatal(err)
					}
				}
				if tc.closed {
					q.Close()
				}
			}
			errs := make([]error, len(tc.events)+1) // longer than the events: only theirs are set
			errs[len(tc.events)] = fmt.Errorf("untouched")
			added := each.EnqueueEach(tc.events, errs)
			wantAdded := 0
			for i, e := range tc.events {
				want := one.Enqueue(e)
				if want == nil {
					wantAdded++
				}
				if fmt.Sprint(errs[i]) != fmt.Sprint(want) || reflect.TypeOf(errs[i]) != reflect.TypeOf(want) {
					t.Errorf("event %d (%v): %v, want %v", i, e, errs[i], want)
				}
			}
			if added != wantAdded || errs[len(tc.events)] == nil {
				t.Fatalf("added %d, want %d (or the error past the events was overwritten)", added, wantAdded)
			}
			if got, want := each.Stats(), one.Stats(); got != want {
				t.Fatalf("stats %+v, want %+v", got, want)
			}
			if got, want := drain(each), drain(one); !reflect.DeepEqual(got, want) {
				t.Fatalf("queued %v, want %v", got, want)
			}
		})
	}
}

// TestEnqueueEachWakesAConsumer: events EnqueueEach adds signal the queue
// ready for a consumer; a batch it adds nothing of does not.
func TestEnqueueEachWakesAConsumer(t *testing.T) {
	q := sink.NewNamedQueue("Q", 2)
	errs := make([]error, 3)
	if added := q.EnqueueEach([]sink.Event{1, 2, 3}, errs); added != 2 {
		t.Fatalf("added %d, want 2", added)
	}
	select {
	case <-q.Ready():
	default:
		t.Fatal("no ready signal after events were added")
	}
	if added := q.EnqueueEach([]sink.Event{4}, errs); added != 0 {
		t.Fatalf("added %d to a full queue, want 0", added)
	}
	select {
	case <-q.Ready():
		t.Fatal("ready signal after a batch of which nothing was added")
	default:
	}
}

// A batch decided each event on its own: what fits is added, the rest
// refused one by one.
func ExampleQueue_EnqueueEach() {
	q := sink.NewNamedQueue("orders", 2)
	errs := make([]error, 3)
	added := q.EnqueueEach([]sink.Event{"a", "b", "c"}, errs)
	fmt.Println(added, "added")
	for i, err := range errs {
		fmt.Println(i, err)
	}
	// Output:
	// 2 added
	// 0 <nil>
	// 1 <nil>
	// 2 sink "orders": enqueue rejected: queue full
}

package remote

import (
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

// TestEventKey: the events a durable replica can track are those usable
// as map keys (a value holding a slice in an interface is not), each its
// own key; those decided by their type alone (not a struct or an array)
// cost no allocation.
func TestEventKey(t *testing.T) {
	p := new(int)
	ch := make(chan int)
	for _, tc := range []struct {
		name      string
		e         any
		trackable bool
		noAllocs  bool
	}{
		{"nil", nil, false, true},
		{"pointer", p, true, true},
		{"string", "GET /", true, true},
		{"int", 42, true, true},
		{"channel", ch, true, true},
		{"slice", []int{1}, false, true},
		{"map", map[int]int{}, false, true},
		{"func", func() {}, false, true},
		{"struct", struct{ a, b int }{1, 2}, true, false},
		{"struct holding an int in an interface", struct{ x any }{1}, true, false},
		{"struct holding a slice in an interface", struct{ x any }{[]int{1}}, false, false},
		{"array holding a slice in an interface", [2]any{1, []int{1}}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, ok := key(tc.e)
			if ok != tc.trackable {
				t.Fatalf("key(%#v) trackable = %v, want %v", tc.e, ok, tc.trackable)
			}
			if ok {
				m := map[any]bool{k: true} // panics if it is no key
				if !m[tc.e] {
					t.Fatalf("key(%#v) = %#v, not the event itself", tc.e, k)
				}
			}
			if tc.noAllocs && !raceEnabled {
				if allocs := testing.AllocsPerRun(100, func() { key(tc.e) }); allocs != 0 {
					t.Fatalf("key(%#v): %.1f allocations, want 0", tc.e, allocs)
				}
			}
		})
	}
}

// TestAckingAllocations: the acking wrapper of a durable stage's handler
// allocates once per batch (the events' keys), not per event: each
// event's key is found once for both its start and its completion, and
// the clock read once per batch.
func TestAckingAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	const runs = 100
	d := &durableReplica{pending: map[any][]*delivery{}, inService: map[*delivery]struct{}{}}
	batch := make([]sink.Event, 32)
	for i := range batch {
		batch[i] = new(int)
		// Held in many deliveries that never settle: each run counts
		// one off, with no setup of its own.
		dl := &delivery{left: 1 << 30, queued: 1 << 30}
		for range runs + 1 {
			d.pending[batch[i]] = append(d.pending[batch[i]], dl)
		}
		d.inService[dl] = struct{}{}
	}
	h := wrapAcking(handlerFunc(func([]sink.Event) error { return nil }), d)
	allocs := testing.AllocsPerRun(runs, func() {
		if err := h.HandleEvents(batch); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("%.1f allocations per batch of %d events, want at most 1", allocs, len(batch))
	}
	if got := len(d.pending[batch[0]]); got != 0 {
		t.Fatalf("%d deliveries left holding the first event, want 0 (each run completes one)", got)
	}
}

// handlerFunc is a stage handler made of a function.
type handlerFunc func([]sink.Event) error

func (f handlerFunc) HandleEvents(batch []sink.Event) error { return f(batch) }

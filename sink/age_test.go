package sink_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
	"github.com/sandstorm-go/sandstorm/sink"
)

type cancelCounter struct{ cancelled []sink.Event }

func (c *cancelCounter) Accept(sink.Event) bool { return true }
func (c *cancelCounter) Cancel(e sink.Event)    { c.cancelled = append(c.cancelled, e) }

func TestExpire(t *testing.T) {
	q := sink.NewQueue(0)
	p := &cancelCounter{}
	q.SetPredicate(p)
	events := []sink.Event{"a", "b", "c", "d", "e"}
	// Stamps relative to now, 5 s after the predicate was installed (an
	// expired event goes back to the predicate that admitted it: the one
	// installed before its stamp): a waited 5 s, b 0.5 s, c 2 s, d is
	// unstamped, e 1 s exactly (not longer than the limit: kept).
	now := sink.Nanotime() + int64(5*time.Second)
	stamps := []int64{now - int64(5*time.Second), now - int64(500*time.Millisecond), now - int64(2*time.Second), 0, now - int64(time.Second)}
	if kept := sinkrt.Of(q).Expire(events, stamps, now); kept != 5 {
		t.Fatalf("no limit: kept %d", kept)
	}
	q.SetMaxAge(time.Second)
	if q.MaxAge() != time.Second {
		t.Fatal(q.MaxAge())
	}
	kept := sinkrt.Of(q).Expire(events, stamps, now)
	if kept != 3 || !slices.Equal(events[:kept], []sink.Event{"b", "d", "e"}) || !slices.Equal(events[kept:], []sink.Event{"a", "c"}) {
		t.Fatalf("kept %d: %v", kept, events)
	}
	if stamps[0] != now-int64(500*time.Millisecond) || stamps[1] != 0 {
		t.Fatalf("stamps not moved with their events: %v", stamps)
	}
	if q.Expired() != 2 || !slices.Equal(p.cancelled, []sink.Event{"a", "c"}) {
		t.Fatalf("expired %d, cancelled %v", q.Expired(), p.cancelled)
	}
	q.SetMaxAge(-time.Second)
	if q.MaxAge() != 0 {
		t.Fatal("negative age limit kept")
	}
}

// TestMaxAgeStampsEveryEvent: with an age limit every event carries its
// entry stamp (without one, only a sample does).
func TestMaxAgeStampsEveryEvent(t *testing.T) {
	q := sink.NewQueue(0)
	q.SetMaxAge(time.Minute)
	for i := range 20 {
		if err := q.Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	events, stamps := make([]sink.Event, 20), make([]int64, 20)
	if n := q.Dequeue(events, stamps); n != 20 || slices.Contains(stamps, 0) {
		t.Fatalf("dequeued %d, stamps %v", n, stamps)
	}
}

// shedOdd sheds events that waited an odd number of seconds.
type shedOdd struct{ cancelCounter }

func (s *shedOdd) Shed(_ sink.Event, waited time.Duration) bool {
	return int(waited/time.Second)%2 == 1
}

func TestExpireShedder(t *testing.T) {
	q := sink.NewQueue(0)
	if sinkrt.Of(q).Sheds() {
		t.Fatal("Sheds without limit or shedder")
	}
	p := &shedOdd{}
	q.SetPredicate(p)
	if !sinkrt.Of(q).Sheds() {
		t.Fatal("Sheds false with a Shedder")
	}
	now := sink.Nanotime() + int64(5*time.Second) // every stamp after the predicate's install
	events := []sink.Event{"a", "b", "c", "d"}
	stamps := []int64{now - int64(time.Second), now - int64(2*time.Second), now - int64(5*time.Second), 0}
	q.SetMaxAge(4 * time.Second) // c expires (age first), a is shed
	kept := sinkrt.Of(q).Expire(events, stamps, now)
	if kept != 2 || !slices.Equal(events, []sink.Event{"b", "d", "a", "c"}) {
		t.Fatalf("kept %d: %v", kept, events)
	}
	if q.Shed() != 1 || q.Expired() != 1 || len(p.cancelled) != 2 {
		t.Fatalf("shed %d expired %d cancelled %v", q.Shed(), q.Expired(), p.cancelled)
	}
}

package remote_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestCombinedVerdictsReachTheirCallers: concurrent Enqueues travel in
// combined requests, and the replica's predicate refuses some of the
// events of a request and admits the others: each caller gets its own
// event's verdict (a refusal wrapping sink.ErrRejected and naming the
// predicate's stage), the refusals are counted on both sides, and the
// handler gets the admitted events alone, each once.
func TestCombinedVerdictsReachTheirCallers(t *testing.T) {
	c := &cluster{t: t}
	ma, _ := c.node(requestGraph, "a", nil)
	work := &recorder{}
	graph := strings.Replace(requestGraph, "threshold: 4", "threshold: 100000", 1)
	mb, _ := c.node(graph, "b", map[string]stage.Handler{"Work": work})
	st, ok := mb.Stage("Work")
	if !ok {
		t.Fatal("no stage Work on node b")
	}
	st.Sink().SetPredicate(sink.PredicateFunc(func(e sink.Event) bool { return e.(int)%3 != 0 }))
	s := remoteSink(t, ma, "Work")
	const callers, calls = 64, 30
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range calls {
				e := g*calls + i
				err := s.Enqueue(e)
				switch refused := e%3 == 0; {
				case refused && !errors.Is(err, sink.ErrRejected):
					t.Errorf("event %d (refused by the replica's predicate): %v, want a rejection", e, err)
				case !refused && err != nil:
					t.Errorf("event %d (admitted by the replica's predicate): %v", e, err)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	total := callers * calls
	refused := (total + 2) / 3 // 0, 3, 6, ... below total
	ss := sinkStats(t, s)
	if ss.Events != uint64(total-refused) || ss.Rejected != uint64(refused) {
		t.Fatalf("sender counts %d events admitted, %d rejected; want %d, %d", ss.Events, ss.Rejected, total-refused, refused)
	}
	if ss.Sent >= uint64(total) {
		t.Fatalf("%d requests for %d Enqueues: none combined", ss.Sent, total)
	}
	if got := st.Stats().RejectedPredicate; got != uint64(refused) {
		t.Fatalf("replica's stage counts %d refused by its predicate, want %d", got, refused)
	}
	waitFor(t, "the admitted events handled", func() bool { return work.count() >= total-refused })
	seen := map[int]int{}
	for _, e := range work.events() {
		seen[e.(int)]++
	}
	for e := range total {
		if want := min(e%3, 1); seen[e] != want {
			t.Fatalf("event %d handled %d times, want %d", e, seen[e], want)
		}
	}
}

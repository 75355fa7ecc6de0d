package remote

import (
	"reflect"
	"slices"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

// TestAdmitEachGroup: a combined request's groups are decided each on
// its own and all or nothing: a group that does not fit is refused
// whole, and the groups after it are still decided.
func TestAdmitEachGroup(t *testing.T) {
	tests := []struct {
		name         string
		capacity     int
		groups       []int
		events       int // with groups nil
		wantEach     []byte
		wantAdmitted int
	}{
		{name: "all fit", capacity: 10, groups: []int{1, 3, 1}, wantEach: []byte{statusOK, statusOK, statusOK}, wantAdmitted: 5},
		{name: "a group too large", capacity: 4, groups: []int{1, 4, 2}, wantEach: []byte{statusOK, statusRejected, statusOK}, wantAdmitted: 3},
		{name: "an event alone after a full queue", capacity: 3, groups: []int{3, 1}, wantEach: []byte{statusOK, statusRejected}, wantAdmitted: 3},
		{name: "every event alone", capacity: 2, events: 3, wantEach: []byte{statusOK, statusOK, statusRejected}, wantAdmitted: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := sink.NewNamedQueue("W", tc.capacity)
			var es []sink.Event
			for i := range sum(tc.groups) + tc.events {
				es = append(es, i)
			}
			v, admitted := admitEach(q, "b", "W", es, tc.groups)
			if !reflect.DeepEqual(v.each, tc.wantEach) || admitted != tc.wantAdmitted {
				t.Fatalf("each %v, admitted %d; want %v, %d", v.each, admitted, tc.wantEach, tc.wantAdmitted)
			}
			if q.Len() != tc.wantAdmitted {
				t.Fatalf("queue holds %d events, want %d", q.Len(), tc.wantAdmitted)
			}
			for _, d := range v.why {
				if d.Node != "b" || d.Stage != "W" || d.Reason == "" {
					t.Fatalf("refusal detail %+v: want node, stage and reason", d)
				}
			}
		})
	}
}

// TestEachRequestGroups: an opEach request carries its groups' sizes;
// sizes that do not add up to its events, or an empty group, are
// refused when decoded.
func TestEachRequestGroups(t *testing.T) {
	w := testWire()
	es := []sink.Event{"a", "b", "c", "d"}
	for _, tc := range []struct{ groups, want []int }{
		{groups: []int{1, 3}, want: []int{1, 3}},
		{groups: []int{1, 1, 2}, want: []int{1, 1, 2}},
		{groups: []int{4}, want: []int{4}},
		{groups: nil, want: nil}, // every event alone
		{groups: []int{1, 1, 1, 1}, want: nil},
	} {
		b, err := w.encodeRequest(nil, &request{op: opEach, id: "x.1", events: es, groups: tc.groups}, "S")
		if err != nil {
			t.Fatal(err)
		}
		q, err := w.decodeRequest(b)
		if err != nil {
			t.Fatal(err)
		}
		want := tc.want
		if !reflect.DeepEqual(q.groups, want) || !reflect.DeepEqual(q.events, es) {
			t.Fatalf("decoded groups %v events %v, want %v %v", q.groups, q.events, want, es)
		}
	}
	for _, groups := range [][]int{{1, 2}, {2, 0, 2}, {5}, {1, 1, 1}} {
		b := requestHeader(nil, opEach, "x.1", "", 0)
		b = appendGroups(b, groups, 0)
		b, _ = w.encodeEvents(b, "S", es)
		if _, err := w.decodeRequest(b); err == nil {
			t.Fatalf("groups %v for 4 events decoded without an error", groups)
		}
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// TestCombinerRounds: callers gather in rounds in the order they come,
// each round as many as fit the limit (its first always, however large)
// and at most maxCombined; the first caller of each heads it.
func TestCombinerRounds(t *testing.T) {
	tests := []struct {
		name  string
		sizes []int // encoded bytes of each caller, in the order they come
		limit int
		want  []int // callers of each round
	}{
		{name: "one", sizes: []int{10}, limit: 100, want: []int{1}},
		{name: "all fit", sizes: []int{10, 20, 30}, limit: 100, want: []int{3}},
		{name: "up to the limit", sizes: []int{40, 40, 40, 40, 40}, limit: 100, want: []int{2, 2, 1}},
		{name: "a first one too large goes alone", sizes: []int{500, 1, 1}, limit: 100, want: []int{1, 2}},
		{name: "a large one after small ones", sizes: []int{1, 500, 1}, limit: 100, want: []int{1, 1, 1}},
		{name: "at most maxCombined", sizes: make([]int, maxCombined+5), limit: 100, want: []int{maxCombined, 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &combiner{limit: tc.limit}
			var all []*pending
			for i, n := range tc.sizes {
				p := &pending{enc: make([]byte, n)}
				all = append(all, p)
				r, head := c.join(p)
				if head != (len(r.callers) == 1) || r.callers[len(r.callers)-1] != p {
					t.Fatalf("caller %d: head %v of a round of %d, or not its last", i, head, len(r.callers))
				}
			}
			var got []int
			var order []*pending
			for _, r := range c.rounds {
				got = append(got, len(r.callers))
				order = append(order, r.callers...)
			}
			if !slices.Equal(got, tc.want) || c.waiting != len(tc.sizes) {
				t.Fatalf("rounds %v, %d waiting; want %v, %d", got, c.waiting, tc.want, len(tc.sizes))
			}
			if !slices.Equal(order, all) {
				t.Fatal("callers out of order")
			}
		})
	}
}

// noSeven refuses the event 7.
type noSeven struct{}

func (noSeven) Accept(e sink.Event) bool { return e != 7 }
func (noSeven) Name() string             { return "noSeven" }

// TestAdmitEachRefusalsInOrder: a verdict's refusal details are in the
// order of the refused groups, so each refused caller gets its own
// reason: here a predicate's refusal and a full queue's, in either
// order, with events alone (EnqueueEach) and in groups (a queue full for
// a group of two still has room for an event alone, which the predicate
// then decides).
func TestAdmitEachRefusalsInOrder(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity int
		events   []sink.Event
		groups   []int
		wantEach []byte
		wantPred []string // the refusals' predicates, in order ("": the queue was full)
	}{
		{name: "alone, predicate then full", capacity: 3, events: []sink.Event{1, 7, 2, 3, 4},
			wantEach: []byte{statusOK, statusRejected, statusOK, statusOK, statusRejected}, wantPred: []string{"noSeven", ""}},
		{name: "groups, full then predicate", capacity: 3, events: []sink.Event{1, 2, 3, 4, 7}, groups: []int{2, 2, 1},
			wantEach: []byte{statusOK, statusRejected, statusRejected}, wantPred: []string{"", "noSeven"}},
		{name: "groups, predicate then full", capacity: 3, events: []sink.Event{1, 7, 8, 2, 3, 4, 5}, groups: []int{1, 2, 2, 2},
			wantEach: []byte{statusOK, statusRejected, statusOK, statusRejected}, wantPred: []string{"noSeven", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := sink.NewNamedQueue("W", tc.capacity)
			q.SetPredicate(noSeven{})
			v, _ := admitEach(q, "b", "W", tc.events, tc.groups)
			if !reflect.DeepEqual(v.each, tc.wantEach) {
				t.Fatalf("each %v, want %v", v.each, tc.wantEach)
			}
			var preds []string
			for _, d := range v.why {
				preds = append(preds, d.Predicate)
			}
			if !reflect.DeepEqual(preds, tc.wantPred) {
				t.Fatalf("refusals by %q, want %q (details %+v)", preds, tc.wantPred, v.why)
			}
		})
	}
}

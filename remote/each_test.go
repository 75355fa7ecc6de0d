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

// TestCombinerTake: a combined request takes the callers in order while
// their encoded events fit the limit, always the first one, at most
// maxCombined.
func TestCombinerTake(t *testing.T) {
	tests := []struct {
		name  string
		sizes []int // encoded bytes of each waiting caller
		limit int
		want  int // callers taken
	}{
		{name: "none waiting", sizes: nil, limit: 100, want: 0},
		{name: "all fit", sizes: []int{10, 20, 30}, limit: 100, want: 3},
		{name: "up to the limit", sizes: []int{40, 40, 40}, limit: 100, want: 2},
		{name: "a first one too large goes alone", sizes: []int{500, 1, 1}, limit: 100, want: 1},
		{name: "at most maxCombined", sizes: make([]int, maxCombined+5), limit: 100, want: maxCombined},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &combiner{}
			for _, n := range tc.sizes {
				c.waiting = append(c.waiting, &pending{enc: make([]byte, n)})
			}
			first := slices.Clone(c.waiting)
			got := c.take(tc.limit)
			if len(got) != tc.want || len(c.waiting) != len(tc.sizes)-tc.want {
				t.Fatalf("took %d, left %d; want %d, %d", len(got), len(c.waiting), tc.want, len(tc.sizes)-tc.want)
			}
			for i, p := range got {
				if p != first[i] {
					t.Fatalf("caller %d taken out of order", i)
				}
			}
		})
	}
}

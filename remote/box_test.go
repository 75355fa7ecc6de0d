package remote

import (
	"reflect"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

type boxPair struct {
	ID   uint32
	Kind byte
}

type boxNamed struct {
	N    int
	Name string
}

type boxPtr struct{ p *int }

// checkBoxed appends vs with appendBoxed and checks that every event is
// the value it came from, of its type.
func checkBoxed[T comparable](t *testing.T, vs []T) {
	t.Helper()
	es := appendBoxed([]sink.Event{"before"}, vs)
	if len(es) != len(vs)+1 || es[0] != "before" {
		t.Fatalf("%T: got %d events, first %v", vs, len(es), es[0])
	}
	for i, v := range vs {
		got, ok := es[i+1].(T)
		if !ok || got != v {
			t.Fatalf("%T: event %d is %#v, want %#v", vs, i, es[i+1], v)
		}
	}
}

func TestAppendBoxed(t *testing.T) {
	one, two := 1, 2
	checkBoxed(t, []boxPair{{1, 'a'}, {2, 'b'}, {1 << 31, 0}})
	checkBoxed(t, []boxNamed{{1, "one"}, {2, "two"}})
	checkBoxed(t, []int64{-1, 0, 1 << 40})
	checkBoxed(t, []byte("xyz"))
	checkBoxed(t, []*int{&one, &two, nil}) // pointer-shaped: boxed as usual
	checkBoxed(t, []boxPtr{{&one}, {nil}})
	checkBoxed(t, []struct{}{{}, {}})
	checkBoxed(t, []string{"a", ""})
}

// TestAppendBoxedAllocations: a run is boxed without an allocation per
// event.
func TestAppendBoxedAllocations(t *testing.T) {
	vs := make([]boxPair, 100)
	es := make([]sink.Event, 0, len(vs))
	if n := testing.AllocsPerRun(10, func() { es = appendBoxed(es[:0], vs) }); n > 1 {
		t.Fatalf("%v allocations to box %d events, want at most 1", n, len(vs))
	}
}

func TestMayBePointerShaped(t *testing.T) {
	for _, c := range []struct {
		v    any
		want bool
	}{
		{boxPair{}, false},
		{boxNamed{}, false},
		{int64(0), false},
		{[2]uint32{}, false},
		{new(int), true},
		{boxPtr{}, true},
		{map[int]int{}, true},
		{make(chan int), true},
		{[1]*int{}, true},
	} {
		if got := mayBePointerShaped(reflect.TypeOf(c.v)); got != c.want {
			t.Errorf("mayBePointerShaped(%T) = %v, want %v", c.v, got, c.want)
		}
	}
}

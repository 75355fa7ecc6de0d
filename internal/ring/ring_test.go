package ring_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/sandstorm-go/sandstorm/internal/ring"
)

// op is one operation on a ring, for the table and the fuzz test.
type op struct {
	kind byte // 'p' push, 'o' pop, 'd' delete multiples of v, 'c' clear
	v    int
}

func (o op) String() string { return fmt.Sprintf("%c%d", o.kind, o.v) }

// model is the reference: a slice holding at most limit values (limit <=
// 0: any number).
type model struct {
	v     []int
	limit int
}

func (m *model) apply(o op) (got int, ok bool) {
	switch o.kind {
	case 'p':
		m.v = append(m.v, o.v)
		if m.limit > 0 && len(m.v) > m.limit {
			got, m.v = m.v[0], m.v[1:]
			return got, true
		}
	case 'o':
		if len(m.v) == 0 {
			return 0, false
		}
		got, m.v = m.v[0], m.v[1:]
		return got, true
	case 'd':
		m.v = slices.DeleteFunc(m.v, func(x int) bool { return o.v != 0 && x%o.v == 0 })
	case 'c':
		m.v = nil
	}
	return 0, false
}

func apply(r *ring.Ring[int], o op) (int, bool) {
	switch o.kind {
	case 'p':
		return r.Push(o.v)
	case 'o':
		return r.Pop()
	case 'd':
		r.DeleteFunc(func(x int) bool { return o.v != 0 && x%o.v == 0 })
	case 'c':
		r.Clear()
	}
	return 0, false
}

// check runs ops on a ring of the limit and on the model, comparing every
// result and the whole state after each step.
func check(t *testing.T, limit int, ops []op) {
	t.Helper()
	r, m := ring.New[int](limit), &model{limit: limit}
	for i, o := range ops {
		got, ok := apply(r, o)
		want, wantOK := m.apply(o)
		if got != want || ok != wantOK {
			t.Fatalf("limit %d, op %d %v of %v: returned (%d, %v), want (%d, %v)", limit, i, o, ops, got, ok, want, wantOK)
		}
		if vals := r.AppendTo(nil); !slices.Equal(vals, m.v) || r.Len() != len(m.v) {
			t.Fatalf("limit %d, after op %d %v of %v: ring %v (Len %d), want %v", limit, i, o, ops, vals, r.Len(), m.v)
		}
		for j, v := range r.All() {
			if r.At(j) != v || v != m.v[j] {
				t.Fatalf("limit %d, after op %d: All/At(%d) = %d/%d, want %d", limit, i, j, v, r.At(j), m.v[j])
			}
		}
		if head, ok := r.Peek(); ok != (len(m.v) > 0) || ok && head != m.v[0] {
			t.Fatalf("limit %d, after op %d: Peek (%d, %v), want %v", limit, i, head, ok, m.v)
		}
		if full := limit > 0 && len(m.v) == limit; r.Full() != full {
			t.Fatalf("limit %d, after op %d: Full %v with %d values", limit, i, r.Full(), len(m.v))
		}
	}
}

func pushes(from, to int) []op {
	var ops []op
	for v := from; v <= to; v++ {
		ops = append(ops, op{'p', v})
	}
	return ops
}

func TestRing(t *testing.T) {
	pops := func(n int) []op { return slices.Repeat([]op{{'o', 0}}, n) }
	tests := []struct {
		name  string
		limit int
		ops   []op
	}{
		{"empty pop", 0, pops(2)},
		{"fifo", 0, slices.Concat(pushes(1, 5), pops(3), pushes(6, 8), pops(6))},
		{"grows across the wrap", 0, slices.Concat(pushes(1, 12), pops(10), pushes(13, 60), pops(30))},
		{"window keeps the last values", 3, pushes(1, 10)},
		{"window of one", 1, slices.Concat(pushes(1, 3), pops(2), pushes(4, 4))},
		{"window pop then refill", 4, slices.Concat(pushes(1, 6), pops(2), pushes(7, 9), pops(5))},
		{"delete keeps the order", 0, slices.Concat(pushes(1, 20), pops(5), []op{{'d', 3}}, pushes(21, 24), []op{{'d', 2}})},
		{"delete in a wrapped window", 5, slices.Concat(pushes(1, 8), []op{{'d', 2}}, pushes(9, 12), []op{{'d', 1}}, pushes(13, 14))},
		{"clear", 3, slices.Concat(pushes(1, 5), []op{{'c', 0}}, pops(1), pushes(6, 9))},
		{"negative limit is unbounded", -1, pushes(1, 40)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { check(t, tt.limit, tt.ops) })
	}
}

func TestZeroRingIsUnbounded(t *testing.T) {
	var r ring.Ring[string]
	for _, s := range []string{"a", "b", "c"} {
		if _, dropped := r.Push(s); dropped {
			t.Fatal("a zero ring dropped a value")
		}
	}
	if got := r.AppendTo(nil); !slices.Equal(got, []string{"a", "b", "c"}) || r.Full() {
		t.Fatalf("%v, full %v", got, r.Full())
	}
}

func TestAtOutOfRange(t *testing.T) {
	r := ring.New[int](2)
	r.Push(1)
	for _, i := range []int{-1, 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("At(%d) did not panic", i)
				}
			}()
			r.At(i)
		}()
	}
}

// FuzzRing compares a ring with a slice model over any sequence of
// operations and any limit.
func FuzzRing(f *testing.F) {
	f.Add(uint8(0), []byte("pppppooopppdc"))
	f.Add(uint8(3), []byte("ppppppppoppppdpppp"))
	f.Add(uint8(1), []byte("popopopp"))
	f.Fuzz(func(t *testing.T, limit uint8, prog []byte) {
		var ops []op
		for i, b := range prog {
			o := op{kind: "ppppood c"[int(b)%9], v: i + 1}
			if o.kind == ' ' {
				continue
			}
			if o.kind == 'd' {
				o.v = int(b)%4 + 1
			}
			ops = append(ops, o)
		}
		check(t, int(limit%17), ops)
	})
}

func BenchmarkWindowPush(b *testing.B) {
	b.ReportAllocs()
	r := ring.New[int64](256)
	for i := range b.N {
		r.Push(int64(i))
	}
}

func BenchmarkQueuePushPop(b *testing.B) {
	b.ReportAllocs()
	var r ring.Ring[int]
	for i := range b.N {
		r.Push(i)
		if i%4 == 3 {
			for range 4 {
				r.Pop()
			}
		}
	}
}

func ExampleNew() {
	w := ring.New[int](3) // the last three samples
	for v := range 5 {
		w.Push(v)
	}
	fmt.Println(w.AppendTo(nil))
	var q ring.Ring[string] // a FIFO queue
	q.Push("a")
	q.Push("b")
	v, _ := q.Pop()
	fmt.Println(v, q.Len())
	// Output:
	// [2 3 4]
	// a 1
}

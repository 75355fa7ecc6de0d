package haboob

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// order lists a recency list's values, front (most recent) first.
func order(r *recency[int]) []int {
	var vs []int
	for e := r.l.Front(); e != nil; e = e.Next() {
		vs = append(vs, e.Value.(int))
	}
	return vs
}

// A use of an entry still in the front quarter leaves the list as it is;
// a use of one further back moves it to the front, and the least recently
// used entry is the one evicted.
func TestRecencyMovesOnlyOutsideFrontQuarter(t *testing.T) {
	var r recency[int]
	marks := make([]recencyMark, 8)
	for i := range marks {
		r.add(&marks[i], i)
	}
	steps := []struct {
		use  int
		want []int
	}{
		{6, []int{7, 6, 5, 4, 3, 2, 1, 0}}, // second of 8: in the front quarter, not moved
		{7, []int{7, 6, 5, 4, 3, 2, 1, 0}},
		{0, []int{0, 7, 6, 5, 4, 3, 2, 1}}, // the last: to the front
		{5, []int{5, 0, 7, 6, 4, 3, 2, 1}}, // fourth: out of the front quarter
		{0, []int{5, 0, 7, 6, 4, 3, 2, 1}},
		{1, []int{1, 5, 0, 7, 6, 4, 3, 2}},
	}
	for i, s := range steps {
		r.used(&marks[s.use])
		if got := order(&r); !slices.Equal(got, s.want) {
			t.Fatalf("step %d, use of %d: order %v, want %v", i, s.use, got, s.want)
		}
	}
	if v, _ := r.oldest(); v != 2 {
		t.Fatalf("oldest %d, want 2", v)
	}
}

// Whatever the uses, additions and removals, an entry just used is at the
// front or within the front quarter of the list.
func TestRecencyUsedEntryInFrontQuarter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var r recency[int]
	marks := map[int]*recencyMark{}
	next := 0
	for step := range 20000 {
		switch op := rng.IntN(10); {
		case op == 0 || len(marks) < 4:
			m := new(recencyMark)
			r.add(m, next)
			marks[next] = m
			next++
		case op == 1:
			v, _ := r.oldest()
			r.remove(marks[v])
			delete(marks, v)
		default:
			// Zipf-like: recent values more often.
			v := next - 1 - int(rng.ExpFloat64()*float64(len(marks))/4)
			m, ok := marks[v]
			if !ok {
				continue
			}
			r.used(m)
			pos := slices.Index(order(&r), v)
			if pos != 0 && pos >= r.len()/4 {
				t.Fatalf("step %d: %d used, at position %d of %d", step, v, pos, r.len())
			}
		}
	}
}

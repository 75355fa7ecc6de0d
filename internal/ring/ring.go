package ring

import "iter"

// Ring is a circular buffer of values. The zero value is an empty,
// unbounded ring.
type Ring[T any] struct {
	buf   []T
	head  int // index in buf of the oldest value
	n     int // values held
	limit int // > 0: at most limit values, Push drops the oldest
}

// New returns an empty ring. With limit > 0 the ring holds at most limit
// values (allocated at once) and Push on a full ring drops the oldest:
// the ring keeps the last limit values pushed. With limit <= 0 it grows
// without bound, like the zero Ring.
func New[T any](limit int) *Ring[T] {
	if limit <= 0 {
		return &Ring[T]{}
	}
	return &Ring[T]{buf: make([]T, limit), limit: limit}
}

// Len returns how many values the ring holds.
func (r *Ring[T]) Len() int { return r.n }

// Cap returns how many values the ring holds without growing.
func (r *Ring[T]) Cap() int { return len(r.buf) }

// Full reports whether a bounded ring holds its limit (the next Push
// drops a value). An unbounded ring is never full.
func (r *Ring[T]) Full() bool { return r.limit > 0 && r.n == r.limit }

// Push appends v as the newest value. On a full bounded ring it drops the
// oldest value and returns it with true.
func (r *Ring[T]) Push(v T) (dropped T, ok bool) {
	if r.Full() {
		dropped, r.buf[r.head] = r.buf[r.head], v
		if r.head++; r.head == len(r.buf) {
			r.head = 0
		}
		return dropped, true
	}
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[r.index(r.n)] = v
	r.n++
	return dropped, false
}

// grow doubles the buffer (at least 16), the values in order from 0.
func (r *Ring[T]) grow() {
	buf := make([]T, max(16, 2*len(r.buf)))
	r.AppendTo(buf[:0])
	r.buf, r.head = buf, 0
}

// index returns the position in buf of the i-th oldest value.
func (r *Ring[T]) index(i int) int {
	if i += r.head; i >= len(r.buf) {
		i -= len(r.buf)
	}
	return i
}

// Pop removes and returns the oldest value; ok is false on an empty ring.
func (r *Ring[T]) Pop() (v T, ok bool) {
	if r.n == 0 {
		return v, false
	}
	var zero T
	v, r.buf[r.head] = r.buf[r.head], zero // no reference kept for the collector
	if r.head++; r.head == len(r.buf) {
		r.head = 0
	}
	if r.n--; r.n == 0 {
		r.head = 0
	}
	return v, true
}

// Peek returns the oldest value without removing it; ok is false on an
// empty ring.
func (r *Ring[T]) Peek() (v T, ok bool) {
	if r.n == 0 {
		return v, false
	}
	return r.buf[r.head], true
}

// At returns the i-th oldest value (0: the oldest, Len()-1: the newest).
// It panics if i is out of range.
func (r *Ring[T]) At(i int) T {
	if i < 0 || i >= r.n {
		panic("ring: index out of range")
	}
	return r.buf[r.index(i)]
}

// All yields the values oldest first with their index (as At's). The ring
// must not change while it runs.
func (r *Ring[T]) All() iter.Seq2[int, T] {
	return func(yield func(int, T) bool) {
		for i := range r.n {
			if !yield(i, r.buf[r.index(i)]) {
				return
			}
		}
	}
}

// AppendTo appends the values to dst, oldest first, and returns it.
func (r *Ring[T]) AppendTo(dst []T) []T {
	end := r.head + r.n
	if end <= len(r.buf) {
		return append(dst, r.buf[r.head:end]...)
	}
	dst = append(dst, r.buf[r.head:]...)
	return append(dst, r.buf[:end-len(r.buf)]...)
}

// DeleteFunc removes the values for which del returns true, keeping the
// others in order.
func (r *Ring[T]) DeleteFunc(del func(T) bool) {
	kept := 0
	for i := range r.n {
		v := r.buf[r.index(i)]
		if del(v) {
			continue
		}
		r.buf[r.index(kept)] = v
		kept++
	}
	var zero T
	for i := kept; i < r.n; i++ {
		r.buf[r.index(i)] = zero
	}
	if r.n = kept; r.n == 0 {
		r.head = 0
	}
}

// Clear removes every value (a bounded ring keeps its buffer).
func (r *Ring[T]) Clear() {
	clear(r.buf)
	r.head, r.n = 0, 0
}

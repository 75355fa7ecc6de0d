package http

import "github.com/sandstorm-go/sandstorm/internal/ring"

// fifo is a first-in first-out queue whose oldest value lies in the
// queue itself and the rest in a ring. A connection's queues (the parsed
// requests waiting for delivery, the requests owed an answer) hold one
// value at a time but under pipelining: kept in the Connection, that
// value is on a line the request touches anyway, where a ring's own
// array would be one more cache line per request, cold at 1024
// connections (docs/haboob-bench.md, "Cutting the cold lines").
type fifo[T any] struct {
	first T // the oldest value, when n > 0
	n     int
	rest  ring.Ring[T] // the values after first
}

// Len returns how many values the queue holds.
func (q *fifo[T]) Len() int { return q.n }

// Push appends v as the newest value.
func (q *fifo[T]) Push(v T) {
	if q.n == 0 {
		q.first = v
	} else {
		q.rest.Push(v)
	}
	q.n++
}

// Pop removes and returns the oldest value; ok is false on an empty queue.
func (q *fifo[T]) Pop() (v T, ok bool) {
	if q.n == 0 {
		return v, false
	}
	v = q.first
	var zero T
	q.first = zero
	if q.n--; q.n > 0 {
		q.first, _ = q.rest.Pop()
	}
	return v, true
}

// At returns the i-th oldest value (0: the oldest). It panics if i is out
// of range.
func (q *fifo[T]) At(i int) T {
	switch {
	case i < 0 || i >= q.n:
		panic("http: fifo index out of range")
	case i == 0:
		return q.first
	}
	return q.rest.At(i - 1)
}

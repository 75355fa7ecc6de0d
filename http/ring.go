package http

// ring is a FIFO queue.
type ring[T any] struct {
	buf  []T
	head int
}

func (r *ring[T]) len() int { return len(r.buf) - r.head }

func (r *ring[T]) front() *T { return &r.buf[r.head] }

func (r *ring[T]) push(v T) {
	if r.head > 0 && r.head >= len(r.buf)/2 {
		n := copy(r.buf, r.buf[r.head:])
		clear(r.buf[n:])
		r.buf, r.head = r.buf[:n], 0
	}
	r.buf = append(r.buf, v)
}

func (r *ring[T]) pop() T {
	v := r.buf[r.head]
	var zero T
	r.buf[r.head] = zero
	r.head++
	if r.head == len(r.buf) {
		r.buf, r.head = r.buf[:0], 0
	}
	return v
}

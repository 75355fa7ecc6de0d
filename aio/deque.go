package aio

// deque is a FIFO that can also drop from its back.
type deque[T any] struct {
	buf  []T
	head int
}

func (d *deque[T]) len() int { return len(d.buf) - d.head }

func (d *deque[T]) front() *T { return &d.buf[d.head] }

func (d *deque[T]) push(v T) {
	if d.head > 0 && d.head >= len(d.buf)/2 {
		n := copy(d.buf, d.buf[d.head:])
		clear(d.buf[n:])
		d.buf, d.head = d.buf[:n], 0
	}
	d.buf = append(d.buf, v)
}

func (d *deque[T]) pushFront(v T) {
	if d.head > 0 {
		d.head--
		d.buf[d.head] = v
		return
	}
	d.buf = append(d.buf, v)
	copy(d.buf[1:], d.buf)
	d.buf[0] = v
}

func (d *deque[T]) pop() T {
	v := d.buf[d.head]
	var zero T
	d.buf[d.head] = zero
	d.head++
	if d.head == len(d.buf) {
		d.buf, d.head = d.buf[:0], 0
	}
	return v
}

func (d *deque[T]) popBack() T {
	i := len(d.buf) - 1
	v := d.buf[i]
	var zero T
	d.buf[i] = zero
	d.buf = d.buf[:i]
	if d.head == len(d.buf) {
		d.buf, d.head = d.buf[:0], 0
	}
	return v
}

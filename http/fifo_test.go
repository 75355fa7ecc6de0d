package http

import (
	"slices"
	"testing"
)

func TestFifoOrder(t *testing.T) {
	// Each op is a push of its value (> 0) or a pop (0); the queue must
	// give back the values in the order pushed, through the inline slot
	// and the ring alike.
	tests := []struct {
		name string
		ops  []int
		want []int // popped, in order
		left []int // still held, oldest first
	}{
		{"empty", nil, nil, nil},
		{"one in, one out", []int{1, 0}, []int{1}, nil},
		{"pop on empty", []int{0, 1}, nil, []int{1}},
		{"pipelined", []int{1, 2, 3, 0, 4, 0, 0}, []int{1, 2, 3}, []int{4}},
		{"drained and refilled", []int{1, 2, 0, 0, 0, 3, 4, 5, 0}, []int{1, 2, 3}, []int{4, 5}},
		{"beyond the ring's first array", seqValues(40), nil, seqValues(40)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var q fifo[int]
			var got []int
			for _, op := range tt.ops {
				if op > 0 {
					q.Push(op)
					continue
				}
				if v, ok := q.Pop(); ok {
					got = append(got, v)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("popped %v, want %v", got, tt.want)
			}
			if q.Len() != len(tt.left) {
				t.Fatalf("Len() = %d, want %d", q.Len(), len(tt.left))
			}
			for i, v := range tt.left {
				if q.At(i) != v {
					t.Errorf("At(%d) = %d, want %d", i, q.At(i), v)
				}
			}
			for _, v := range tt.left {
				if got, ok := q.Pop(); !ok || got != v {
					t.Errorf("Pop() = %d, %v, want %d", got, ok, v)
				}
			}
			if _, ok := q.Pop(); ok || q.Len() != 0 {
				t.Errorf("not empty after popping everything: Len() = %d", q.Len())
			}
		})
	}
}

func TestFifoPopClearsTheSlot(t *testing.T) {
	// A popped request must not stay referenced by the queue (it is
	// recycled or collected).
	var q fifo[*Request]
	q.Push(&Request{})
	q.Pop()
	if q.first != nil {
		t.Error("the inline slot still holds the popped value")
	}
}

func TestFifoAtOutOfRange(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("At(1) on a queue of one did not panic")
		}
	}()
	var q fifo[int]
	q.Push(1)
	q.At(1)
}

func seqValues(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i + 1
	}
	return s
}

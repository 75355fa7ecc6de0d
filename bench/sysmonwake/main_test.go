package main

import (
	"os"
	"testing"
	"time"
)

// TestWaiterWakesWhenReadable checks each way of waiting returns once the
// pipe has data, and again for the next write.
func TestWaiterWakesWhenReadable(t *testing.T) {
	for _, mode := range []string{"epoll", "netpoll", "nested-epoll"} {
		t.Run(mode, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close()
			wait, err := waiter(mode, r)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				done := make(chan error, 1)
				go func() { done <- wait() }()
				if _, err := w.Write([]byte{1}); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("wake-up %d: %v", i, err)
					}
				case <-time.After(10 * time.Second): // hang guard only
					t.Fatalf("wake-up %d: wait did not return", i)
				}
				if _, err := r.Read(make([]byte, 16)); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestWaiterRejectsUnknownMode(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := waiter("spin", r); err == nil {
		t.Fatal("waiter accepted mode spin")
	}
}

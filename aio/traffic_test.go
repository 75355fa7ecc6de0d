package aio

import (
	"bytes"
	"io"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

// A reply written while the event loop delivers the request (the reader
// answers inside its Enqueue, as HTTP's Combine path does) is written by
// the loop itself once the delivery is done: no AsyncWrite, one loop
// write per delivery, the bytes whole and in order, every completion
// called. A write from another goroutine afterwards takes AsyncWrite.
func TestRepliesDuringTrafficWrittenByTheLoop(t *testing.T) {
	checkLeaks(t)
	_, _, c, client := serverConn(t, SocketConfig{})
	done := make(chan error, 64)
	echo := fnSink(func(e sink.Event) error {
		p, ok := e.(Packet)
		if !ok {
			return nil
		}
		// Two writes per packet: both leave in the loop's one write.
		reply := append([]byte("re:"), p.Data...)
		if err := c.Write(reply[:3], nil, func(err error) { done <- err }); err != nil {
			return err
		}
		return c.Write(reply[3:], nil, func(err error) { done <- err })
	})
	if err := c.StartReader(echo); err != nil {
		t.Fatal(err)
	}
	const rounds = 5
	for i := range rounds {
		msg := []byte{'a' + byte(i), '\n'}
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 3+len(msg))
		if _, err := io.ReadFull(client, got); err != nil {
			t.Fatal(err)
		}
		if want := append([]byte("re:"), msg...); !bytes.Equal(got, want) {
			t.Fatalf("round %d: got %q, want %q", i, got, want)
		}
		for range 2 {
			if err := <-done; err != nil {
				t.Fatalf("round %d: completion %v", i, err)
			}
		}
	}
	st := c.Stats()
	if st.LoopWrites != rounds || st.AsyncWrites != 0 {
		t.Fatalf("loop writes %d, async writes %d; want %d and 0", st.LoopWrites, st.AsyncWrites, rounds)
	}

	// Outside a delivery: handed to gnet.
	if err := c.Write([]byte("late"), nil, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(client, got); err != nil || string(got) != "late" {
		t.Fatalf("got %q, %v", got, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.AsyncWrites != 1 || st.LoopWrites != rounds {
		t.Fatalf("after a write from the test: loop writes %d, async writes %d; want %d and 1", st.LoopWrites, st.AsyncWrites, rounds)
	}
}

// The event loops yield once every yieldEvery traffic events (counted
// over every loop of the socket), so that a loop that never blocks is not
// taken for a long-running goroutine.
func TestEventLoopYields(t *testing.T) {
	checkLeaks(t)
	_, _, c, client := serverConn(t, SocketConfig{})
	echo := fnSink(func(e sink.Event) error {
		if p, ok := e.(Packet); ok {
			return c.Write(p.Data, nil, nil)
		}
		return nil
	})
	if err := c.StartReader(echo); err != nil {
		t.Fatal(err)
	}
	const rounds = 3*yieldEvery + 1
	buf := []byte{'x'}
	for range rounds {
		if _, err := client.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(client, buf); err != nil {
			t.Fatal(err)
		}
	}
	traffic, yields := c.eng.traffic.Load(), c.eng.yields.Load()
	if traffic < rounds {
		t.Fatalf("%d traffic events for %d round trips", traffic, rounds)
	}
	if want := traffic / yieldEvery; yields != want {
		t.Fatalf("%d yields after %d traffic events, want %d", yields, traffic, want)
	}
}

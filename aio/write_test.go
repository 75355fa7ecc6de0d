package aio

import (
	"bytes"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// Write queues beyond the window by reference and the bytes still arrive
// whole and in order, with every done called once, in order, with nil;
// the pending output never passes the window.
func TestWriteBeyondWindowInOrder(t *testing.T) {
	checkLeaks(t)
	const window = 8 << 10
	srv, _, c, client := serverConn(t, SocketConfig{WriteWindow: window, OutputBudget: 16 << 10})
	var (
		mu    sync.Mutex
		order []int
		want  bytes.Buffer
	)
	const writes = 12
	for i := range writes {
		p := pattern(i, 100<<10+i)
		want.Write(p)
		done := func(err error) {
			if err != nil {
				t.Errorf("write %d: %v", i, err)
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		}
		var err error
		if i%2 == 0 {
			err = c.Write(p[:10], [][]byte{p[10:5000], p[5000:]}, done)
		} else {
			err = c.Write(p, nil, done)
		}
		if err != nil {
			t.Fatal(err)
		}
		if p := srv.Stats().OutputPending; p > window+writes {
			t.Fatalf("OutputPending %d over the window %d", p, window)
		}
	}
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("bytes out of order or corrupted")
	}
	waitCond(t, "every done", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == writes })
	for i, v := range order {
		if v != i {
			t.Fatalf("done order %v", order)
		}
	}
	if p := srv.Stats().OutputPending; p != 0 {
		t.Fatalf("OutputPending %d after everything was read", p)
	}
}

// Linger sends the response and a FIN although the peer's input was never
// read: the peer reads the response and end of file, not a reset.
func TestLingerDeliversResponseDespiteUnreadInput(t *testing.T) {
	checkLeaks(t)
	srv, _, c, client := serverConn(t, SocketConfig{LingerTimeout: 5 * time.Second})
	if err := c.StartReader(Func(func(sink.Event) error { return nil })); err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 256<<10)
	go func() { _, _ = client.Write(junk) }() // the server never looks at it
	if err := c.Write([]byte("HTTP/1.1 431 Too Large\r\n\r\n"), nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Linger(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(client)
	if err != nil || string(got) != "HTTP/1.1 431 Too Large\r\n\r\n" {
		t.Fatalf("read %q, %v; want the response and end of file", got, err)
	}
	_ = client.CloseWrite()
	waitCond(t, "the close", func() bool { return srv.Stats().Closed == 1 })
	if n := srv.Stats().Lingered; n != 1 {
		t.Fatalf("Lingered = %d, want 1", n)
	}
}

// SetTimer delivers TimerExpired to the reader.
func TestSetTimer(t *testing.T) {
	checkLeaks(t)
	_, _, c, _ := serverConn(t, SocketConfig{})
	reader := newRecorder("reader")
	if err := c.StartReader(reader); err != nil {
		t.Fatal(err)
	}
	c.SetTimer(time.Millisecond)
	reader.wait(t, "TimerExpired", func(evs []sink.Event) bool { return count[TimerExpired](evs) == 1 })
}

// A peer that resets the connection while output waits behind the window
// makes the event loop's next write fail, and gnet then closes the
// connection at once, on the same goroutine (OnClose inside Writev). That
// write must not run under the connection's lock: every round's writes
// complete (with an error for what was never sent) and the connection
// reports closed, instead of the event loop deadlocking on itself.
func TestResetWhileOutputWaitsBehindWindow(t *testing.T) {
	checkLeaks(t)
	const window = 8 << 10
	owner := newRecorder("owner")
	srv := listen(t, SocketConfig{WriteWindow: window, OutputBudget: 16 << 10}, owner)
	const rounds, writes = 20, 16
	for r := range rounds {
		client := dial(t, srv)
		evs := owner.wait(t, "connection", func(evs []sink.Event) bool { return count[*Connection](evs) == r+1 })
		var c *Connection
		for _, e := range evs {
			if cc, ok := e.(*Connection); ok {
				c = cc
			}
		}
		var mu sync.Mutex
		completed := 0
		for i := range writes {
			err := c.Write(pattern(i, 64<<10), nil, func(error) {
				mu.Lock()
				completed++
				mu.Unlock()
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		// Read a little, so that the window moves and the event loop
		// hands over bytes from behind it, then reset.
		buf := make([]byte, 3*window)
		if _, err := io.ReadFull(client, buf); err != nil {
			t.Fatal(err)
		}
		_ = client.SetLinger(0)
		_ = client.Close()
		waitCond(t, "every write completed", func() bool { mu.Lock(); defer mu.Unlock(); return completed == writes })
		owner.wait(t, "closed", func(evs []sink.Event) bool { return count[SinkClosed](evs) == r+1 })
	}
}

// TestEmptyWriteCallsDone: a Write of nothing still calls its done once
// (Write's contract: exactly once, unless Write returns an error), after
// the bytes written before it. Before, an empty write's done was skipped
// with the write and never called.
func TestEmptyWriteCallsDone(t *testing.T) {
	checkLeaks(t)
	_, _, c, client := serverConn(t, SocketConfig{})
	order := make(chan string, 2)
	if err := c.Write([]byte("hello"), nil, func(error) { order <- "hello" }); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(nil, nil, func(err error) {
		if err != nil {
			t.Errorf("empty write's done: %v", err)
		}
		order <- "empty"
	}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	_ = client.SetReadDeadline(time.Now().Add(time.Minute)) // hang guard
	if _, err := io.ReadFull(client, got); err != nil || string(got) != "hello" {
		t.Fatalf("read %q, %v", got, err)
	}
	for _, want := range []string{"hello", "empty"} {
		select {
		case got := <-order:
			if got != want {
				t.Fatalf("done of %q before %q's", got, want)
			}
		case <-time.After(time.Minute): // hang guard only
			t.Fatalf("the done of the %s write was never called", want)
		}
	}
}

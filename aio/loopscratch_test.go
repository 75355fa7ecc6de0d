package aio

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/sandstorm-go/sandstorm/sink"
)

// The slices an event loop writes output with (loopScratch) are the
// loop's, shared by its connections, and are given back after every
// write: two connections on one loop, each answering every packet with
// a header and a file segment (a writev or a corked write, then
// sendfile) whose done is owed, use the same scratch, and after each
// answer its ops, pieces and completions are back in it, ready for the
// next (a slice not given back would cost an allocation per request;
// 2026-11-27, the sendfile path lost the ops slice).
func TestLoopScratchSharedAndGivenBack(t *testing.T) {
	checkLeaks(t)
	owner := newRecorder("owner")
	srv := listen(t, SocketConfig{EventLoops: 1}, owner)
	body := pattern(3, 20000)
	f := tempFile(t, body)
	clients := []io.ReadWriter{dial(t, srv), dial(t, srv)}
	evs := owner.wait(t, "connections", func(evs []sink.Event) bool { return count[*Connection](evs) == len(clients) })
	var conns []*Connection
	for _, e := range evs {
		c, ok := e.(*Connection)
		if !ok {
			continue
		}
		conns = append(conns, c)
		answer := fnSink(func(e sink.Event) error {
			if p, ok := e.(Packet); ok {
				f.Retain()
				return c.WriteFile(bytes.Clone(p.Data), f, 0, int64(len(body)), func(error) {})
			}
			return nil
		})
		if err := c.StartReader(answer); err != nil {
			t.Fatal(err)
		}
	}
	want := func(header []byte) []byte { return append(bytes.Clone(header), body...) }
	for round := range 3 {
		for i, client := range clients {
			header := pattern(10*round+i, 200)
			if _, err := client.Write(header); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(header)+len(body))
			if _, err := io.ReadFull(client, got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want(header)) {
				t.Fatalf("round %d, client %d: the answer differs", round, i)
			}
			c := conns[i]
			onLoop(t, c, func() {
				sc := c.scratch()
				if c.traffic == nil || sc != &c.traffic.scratch || sc != conns[1-i].scratch() {
					t.Errorf("round %d, connection %d: scratch %p is not its loop's, shared", round, i, sc)
				}
				if sc.ops == nil || sc.bufs == nil || sc.done == nil {
					t.Errorf("round %d, connection %d: scratch not given back (ops %v, bufs %v, done %v)",
						round, i, sc.ops != nil, sc.bufs != nil, sc.done != nil)
				}
			})
		}
	}
}

// onLoop runs fn on c's event loop and returns once it has run.
func onLoop(t *testing.T, c *Connection, fn func()) {
	t.Helper()
	done := make(chan struct{})
	err := c.gc.EventLoop().Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		fn()
		close(done)
		return nil
	}))
	if err != nil {
		t.Fatalf("queueing a task on the event loop: %v", err)
	}
	select {
	case <-done:
	case <-time.After(waitLimit): // a hang guard only
		t.Fatalf("the event loop did not run a queued task within %v", waitLimit)
	}
}

package aio

import (
	"fmt"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/sink/sinktest"
)

// TestConnectionSinktest runs the sink conformance suite on a server
// connection over a real loopback socket: an event is a *WriteRequest of
// one numbered line; consuming it is reading its line at the client. An
// admitted write is done when its bytes are written, cancelled when the
// connection refuses it or closes with it unsent.
func TestConnectionSinktest(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) sinktest.Harness {
		conns := make(chan *Connection, 1)
		srv := listen(t, SocketConfig{}, fnSink(func(e sink.Event) error {
			if c, ok := e.(*Connection); ok {
				conns <- c
			}
			return nil
		}))
		client := dial(t, srv)
		var c *Connection
		select {
		case c = <-conns:
		case <-time.After(waitLimit):
			t.Fatal("no connection")
		}
		const line = 8
		var mu sync.Mutex
		evs := map[int]*WriteRequest{}
		buf := make([]byte, line)
		return sinktest.Harness{
			Sink: c,
			Event: func(i int) sink.Event {
				w := &WriteRequest{Data: fmt.Appendf(nil, "%07d\n", i)}
				mu.Lock()
				evs[i] = w
				mu.Unlock()
				return w
			},
			Consume: func() (sink.Event, bool) {
				_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.ReadFull(client, buf); err != nil {
					return nil, false
				}
				i, err := strconv.Atoi(string(buf[:line-1]))
				if err != nil {
					t.Errorf("bad line %q", buf)
					return nil, false
				}
				mu.Lock()
				defer mu.Unlock()
				return evs[i], true
			},
			Close:             func() { _ = c.Close() },
			ClosedErr:         sink.ErrClosed,
			ConsumeAfterClose: true,
			Limit: func(limit int) (sink.Predicate, func() int) {
				p := enqueuepred.NewCounter(limit)
				return p, p.(interface{ InFlight() int }).InFlight
			},
		}
	})
}

// TestConnectionAdmissionCloseCancels: writes a concurrency limit
// admitted and that are still unsent when the connection is aborted (the
// peer does not read) are cancelled, those refused by the write
// threshold after admission too: the limit ends holding nothing.
func TestConnectionAdmissionCloseCancels(t *testing.T) {
	conns := make(chan *Connection, 1)
	srv := listen(t, SocketConfig{}, fnSink(func(e sink.Event) error {
		if c, ok := e.(*Connection); ok {
			conns <- c
		}
		return nil
	}))
	_ = dial(t, srv) // never reads
	c := <-conns
	limit := enqueuepred.NewCounter(1 << 20)
	c.SetPredicate(limit)
	chunk := make([]byte, 64<<10)
	accepted, refused := 0, 0
	for range 400 {
		if err := c.Enqueue(chunk); err != nil {
			refused++
			continue
		}
		accepted++
	}
	if accepted == 0 || refused == 0 {
		t.Fatalf("accepted %d, refused %d: want both (the write threshold)", accepted, refused)
	}
	if c.Stats().Outstanding == 0 {
		t.Fatal("nothing left unsent")
	}
	_ = c.Abort()
	waitCond(t, "every admitted write completed", func() bool { return limit.(interface{ InFlight() int }).InFlight() == 0 })
}

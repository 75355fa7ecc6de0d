package http

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/sink"
)

// A connection closing builds its error only for those who receive it:
// with no stream being sent and no request context made, none is built
// at the close; a context made before the close, or asked for after it,
// is cancelled with the close's error all the same (the closed
// connection, the reason and the socket's error).
func TestCloseErrorBuiltOnlyWhenReceived(t *testing.T) {
	tests := []struct {
		name          string
		contextBefore bool // a request asked for its context before the close
	}{
		{"context made before the close", true},
		{"context asked for after the close", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := closableConnection(t)
			var before context.Context
			if tc.contextBefore {
				before = c.life.context()
			}
			c.onClosed(aio.SinkClosed{Reason: aio.ClosedPeer, Err: io.EOF})
			c.life.mu.Lock()
			built := c.life.cause != nil
			c.life.mu.Unlock()
			if built != tc.contextBefore {
				t.Fatalf("error built at the close: %v, want %v", built, tc.contextBefore)
			}
			ctx := c.life.context()
			if before != nil && ctx != before {
				t.Fatal("the context changed at the close")
			}
			if ctx.Err() == nil {
				t.Fatal("the context is live after the close")
			}
			cause := context.Cause(ctx)
			if !errors.Is(cause, sink.ErrClosed) || !errors.Is(cause, io.EOF) ||
				!strings.Contains(cause.Error(), "connection closed") || !strings.Contains(cause.Error(), aio.ClosedPeer.String()) {
				t.Fatalf("cause %v, want the connection closed by the peer (EOF)", cause)
			}
			if again := context.Cause(c.life.context()); again != cause {
				t.Fatalf("a second context's cause %v, want the same error %v", again, cause)
			}
		})
	}
}

// closableConnection is a Connection on a real loopback socket, whose
// onClosed the test calls itself.
func closableConnection(t *testing.T) *Connection {
	t.Helper()
	got := make(chan *Connection, 1)
	cfg := ServerConfig{}
	cfg.Socket.Addr = "127.0.0.1:0"
	cfg.Inline = func(r *Request) bool {
		got <- r.Conn.(*Connection)
		return true
	}
	srv, err := Listen(cfg, sink.NewQueue(0), aio.Env{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	client, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	if _, err := io.WriteString(client, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return <-got
}

package http_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
)

// TestRequestContextCancelledOnClose: over a real socket, a request's
// Context (and a context derived from it, as otelstage sets) is live
// while the client is connected and cancelled, with the closed
// connection as cause, once the client hangs up, so a handler still
// working on it can stop; a request asked for its context after the
// close gets a cancelled one.
func TestRequestContextCancelledOnClose(t *testing.T) {
	reqs, client := inlineServer(t, http.ServerConfig{}, 4)
	if _, err := io.WriteString(client, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /later HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	recv := func() *http.Request {
		select {
		case r := <-reqs:
			return r
		case <-time.After(10 * time.Second): // hang guard
			t.Fatal("no request")
			return nil
		}
	}
	slow, later := recv(), recv()
	ctx := slow.Context()
	derived, cancel := context.WithCancel(ctx)
	defer cancel()
	slow.SetContext(derived)
	if ctx.Err() != nil || slow.Context().Err() != nil {
		t.Fatalf("context ended while the client is connected: %v", context.Cause(ctx))
	}
	if ctx != later.Context() {
		t.Error("two requests of one connection have different contexts")
	}
	client.Close()
	for _, c := range []context.Context{ctx, slow.Context()} {
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second): // hang guard
			t.Fatal("request context not cancelled after the client closed")
		}
		cause := context.Cause(c)
		if !errors.Is(cause, sink.ErrClosed) || !strings.Contains(cause.Error(), "connection closed") {
			t.Errorf("cause %v, want the connection's close", cause)
		}
	}
	// Asked for after the close, the context is the cancelled one.
	later.SetContext(nil)
	if later.Context().Err() == nil {
		t.Error("a context asked for after the close is live")
	}
}

// TestRequestContextWithoutConnection: a Request no server parsed has
// context.Background().
func TestRequestContextWithoutConnection(t *testing.T) {
	if ctx := new(http.Request).Context(); ctx != context.Background() {
		t.Fatalf("context %v", ctx)
	}
}

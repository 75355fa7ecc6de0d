package http_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/internal/h2test"
	"github.com/sandstorm-go/sandstorm/sink"
)

// TestH2RejectedStreamGets503 sends streams to an application that
// refuses every request: each stream gets 503 with Retry-After, counted,
// and the connection goes on serving.
func TestH2RejectedStreamGets503(t *testing.T) {
	srv, err := http.Listen(http.ServerConfig{Socket: aio.SocketConfig{Addr: "127.0.0.1:0"}, RetryAfter: 2 * time.Second},
		rejectAll{sink.NewQueue(1)}, aio.Env{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	client := h2test.Client(t)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get("http://" + srv.Addr().String() + "/")
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" || resp.ProtoMajor != 2 {
				t.Errorf("got %s %d Retry-After %q", resp.Proto, resp.StatusCode, resp.Header.Get("Retry-After"))
			}
		}()
	}
	wg.Wait()
	if st := srv.Stats(); st.Rejected != 20 || st.ByClass[5] != 20 || st.HTTP2.Connections != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestH2ClientNotReadingClosed: a client that never opens its windows
// holds the server's DATA back; after WriteTimeout the connection is
// closed and counted, and another client is served meanwhile.
func TestH2ClientNotReadingClosed(t *testing.T) {
	f := startServer(t, http.ServerConfig{WriteTimeout: 200 * time.Millisecond}, answerSized)
	c := h2test.Dial(t, f.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	for id := uint32(1); id <= 9; id += 2 {
		if err := c.Get(id, "/size/100000"); err != nil {
			t.Fatal(err)
		}
	}
	client := h2test.Client(t)
	resp, err := client.Get("http://" + f.addr + "/size/70000")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(body) != 70000 {
		t.Fatalf("normal client: %d, %d bytes", resp.StatusCode, len(body))
	}
	for {
		if _, err := c.Framer.ReadFrame(); err != nil {
			break // closed by the server (the hang guard is the deadline)
		}
	}
	if st := f.srv.Stats().HTTP2; st.WriteStalls != 1 {
		t.Fatalf("stats %+v, want one write stall", st)
	}
}

// TestH2OverMaxConnections: an h2 connection beyond MaxConnections gets
// 503 with Retry-After on its stream, then GOAWAY and the close, as an
// HTTP/1.1 one gets 503 and the close.
func TestH2OverMaxConnections(t *testing.T) {
	f := startServer(t, http.ServerConfig{MaxConnections: 1}, answerSized)
	first := h2test.Dial(t, f.addr)
	if err := first.Get(1, "/size/10"); err != nil {
		t.Fatal(err)
	}
	if status, _, err := first.Response(1); err != nil || status != "200" {
		t.Fatalf("first connection: %q %v", status, err)
	}
	second := h2test.Dial(t, f.addr)
	if err := second.Get(1, "/size/10"); err != nil {
		t.Fatal(err)
	}
	status, _, err := second.Response(1)
	if err != nil || status != "503" {
		t.Fatalf("connection over the limit: %q %v", status, err)
	}
	if g, err := second.GoAway(); err != nil || g.ErrCode != http2.ErrCodeNo {
		t.Fatalf("connection over the limit: GOAWAY %v, %v", g, err)
	}
	if st := f.srv.Stats(); st.OverLimit != 1 || st.ByClass[5] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestH2StreamTimeouts: a stream whose body does not come gets 408, one
// the application does not answer gets 503, each on its stream, and
// the connection serves the next stream.
func TestH2StreamTimeouts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    http.ServerConfig
		path   string
		end    bool // END_STREAM on the HEADERS
		status string
		count  func(http.ServerStats) uint64
	}{
		{"body never sent", http.ServerConfig{RequestTimeout: 100 * time.Millisecond}, "/size/10", false, "408",
			func(s http.ServerStats) uint64 { return s.RequestTimeouts }},
		{"never answered", http.ServerConfig{ResponseTimeout: 100 * time.Millisecond}, "/hold", true, "503",
			func(s http.ServerStats) uint64 { return s.ResponseTimeouts }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startServer(t, tc.cfg, func(req *http.Request) {
				if req.Path != "/hold" {
					answerSized(req)
				}
			})
			c := h2test.Dial(t, f.addr)
			if err := c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.Block(tc.path),
				EndStream: tc.end, EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
			if status, _, err := c.Response(1); err != nil || status != tc.status {
				t.Fatalf("stream 1: %q, %v; want %s", status, err, tc.status)
			}
			if err := c.Get(3, "/size/100"); err != nil {
				t.Fatal(err)
			}
			if status, body, err := c.Response(3); err != nil || status != "200" || len(body) != 100 {
				t.Fatalf("stream 3: %q, %d bytes, %v", status, len(body), err)
			}
			if n := tc.count(f.srv.Stats()); n != 1 {
				t.Fatalf("counted %d, want 1", n)
			}
		})
	}
}

// TestH2SlowFramesTimedOut: a client that sends a frame (or a header
// block) in part and no more gets GOAWAY after RequestTimeout, counted,
// like an HTTP/1.1 request that does not arrive; and an idle client is
// sent GOAWAY after IdleTimeout.
func TestH2SlowFramesTimedOut(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   http.ServerConfig
		send  func(c *h2test.Conn) error
		count func(http.ServerStats) uint64
	}{
		{"half a frame header", http.ServerConfig{RequestTimeout: 100 * time.Millisecond},
			func(c *h2test.Conn) error { _, err := c.Conn.Write([]byte{0, 0, 4, 1}); return err },
			func(s http.ServerStats) uint64 { return s.RequestTimeouts }},
		{"HEADERS without END_HEADERS", http.ServerConfig{RequestTimeout: 100 * time.Millisecond},
			func(c *h2test.Conn) error {
				b := c.Block("/size/10")
				return c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:2], EndStream: true})
			},
			func(s http.ServerStats) uint64 { return s.RequestTimeouts }},
		{"idle", http.ServerConfig{IdleTimeout: 100 * time.Millisecond},
			func(c *h2test.Conn) error { return nil },
			func(s http.ServerStats) uint64 { return s.IdleClosed }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startServer(t, tc.cfg, answerSized)
			c := h2test.Dial(t, f.addr)
			if err := tc.send(c); err != nil {
				t.Fatal(err)
			}
			if _, err := c.GoAway(); err != nil {
				t.Fatalf("no GOAWAY: %v", err)
			}
			if n := tc.count(f.srv.Stats()); n != 1 {
				t.Fatalf("counted %d, want 1", n)
			}
		})
	}
}

// TestH2RequestContextCancelledOnClose: an h2 stream's request has its
// connection's context, cancelled with the close as cause when the
// client hangs up, as for HTTP/1.1.
func TestH2RequestContextCancelledOnClose(t *testing.T) {
	reqs, client := inlineServer(t, http.ServerConfig{}, 4)
	raw := h2test.On(t, client)
	if err := raw.Get(1, "/slow"); err != nil {
		t.Fatal(err)
	}
	var req *http.Request
	select {
	case req = <-reqs:
	case <-time.After(10 * time.Second): // hang guard
		t.Fatal("no request")
	}
	ctx := req.Context()
	if ctx.Err() != nil {
		t.Fatalf("context ended while the client is connected: %v", context.Cause(ctx))
	}
	client.Close()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second): // hang guard
		t.Fatal("request context not cancelled after the client closed")
	}
	if cause := context.Cause(ctx); !errors.Is(cause, sink.ErrClosed) {
		t.Errorf("cause %v, want the connection's close", cause)
	}
}

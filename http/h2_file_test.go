package http_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	nethttp "net/http"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/internal/h2test"
)

// h2FileCases are the file-body answers of fileFixture.handle as an
// HTTP/2 client sees them.
func h2FileCases(ff *fileFixture) []struct {
	method, path string
	status       int
	body         []byte
} {
	return []struct {
		method, path string
		status       int
		body         []byte
	}{
		{"GET", "/full", 200, ff.data},
		{"HEAD", "/full", 200, nil},
		{"GET", "/range/7-70006", 206, ff.data[7:70007]},
		{"GET", "/range/0-0", 206, ff.data[:1]},
		{"GET", "/cond", 304, nil},
		{"GET", "/a", 200, []byte("small /a")},
	}
}

// File bodies on HTTP/2, over h2c and over TLS: GET, HEAD, ranges and a
// 304 arrive byte-exact and every reference to the file is released.
func TestH2FileBody(t *testing.T) {
	store, clientTLS := selfSignedTLS(t)
	tests := []struct {
		name   string
		cfg    http.ServerConfig
		client func(t *testing.T) *nethttp.Client
		scheme string
	}{
		{"h2c", http.ServerConfig{}, h2test.Client, "http"},
		{"tls", http.ServerConfig{Socket: aio.SocketConfig{TLS: &aio.TLSConfig{Store: store}}}, func(t *testing.T) *nethttp.Client {
			tr := &http2.Transport{TLSClientConfig: clientTLS}
			t.Cleanup(tr.CloseIdleConnections)
			return &nethttp.Client{Transport: tr, Timeout: time.Minute}
		}, "https"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ff := newFileFixture(t, 3<<20+5)
			f := startServer(t, tc.cfg, ff.handle)
			client := tc.client(t)
			for _, c := range h2FileCases(ff) {
				req, _ := nethttp.NewRequest(c.method, tc.scheme+"://"+f.addr+c.path, nil)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", c.method, c.path, err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.ProtoMajor != 2 || resp.StatusCode != c.status || !bytes.Equal(body, c.body) {
					t.Fatalf("%s %s: %s %d with %d bytes (%v), want HTTP/2 %d with %d", c.method, c.path,
						resp.Proto, resp.StatusCode, len(body), err, c.status, len(c.body))
				}
			}
			ff.waitReleased(t)
		})
	}
}

// Many large file bodies on one connection with a small stream window:
// every stream's DATA stays within its window, the streams interleave,
// each body arrives byte-exact, and every reference is released.
func TestH2FileBodiesInterleaved(t *testing.T) {
	ff := newFileFixture(t, 1<<20+17)
	f := startServer(t, http.ServerConfig{}, ff.handle)
	const window = 20000
	c := h2test.Dial(t, f.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
	ids := []uint32{1, 3, 5, 7, 9, 11, 13, 15}
	for _, id := range ids {
		if err := c.Get(id, "/full"); err != nil {
			t.Fatal(err)
		}
	}
	bodies, order, err := c.Bodies(window, ids...)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if !bytes.Equal(bodies[id], ff.data) {
			t.Errorf("stream %d: %d bytes, not the file's %d", id, len(bodies[id]), len(ff.data))
		}
	}
	if !interleaved(order) {
		t.Errorf("streams not interleaved: %v...", order[:min(len(order), 40)])
	}
	ff.waitReleased(t)
}

// A file body given up on before its end releases the file: the client
// resets the stream, the client closes the connection, the server shuts
// down (GOAWAY), or the file is shorter than the body promised (the
// stream is reset with INTERNAL_ERROR and the connection goes on).
func TestH2FileBodyReleased(t *testing.T) {
	tests := []struct {
		name string
		path string
		end  func(t *testing.T, f *fixture, c *h2test.Conn)
	}{
		{"client reset", "/full", func(t *testing.T, f *fixture, c *h2test.Conn) {
			if err := c.Framer.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
				t.Fatal(err)
			}
		}},
		{"client close", "/full", func(t *testing.T, f *fixture, c *h2test.Conn) { c.Conn.Close() }},
		{"server close", "/full", func(t *testing.T, f *fixture, c *h2test.Conn) { _ = f.srv.Close() }},
		{"file too short", "/past", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ff := newFileFixture(t, 4<<20)
			f := startServer(t, http.ServerConfig{}, func(req *http.Request) {
				if req.Path == "/past" {
					size := int64(len(ff.data))
					_ = http.Respond(req, http.NewFileBodyResponse(200, "", ff.file.Retain(), size-100_000, 200_000))
					return
				}
				ff.handle(req)
			})
			c := h2test.Dial(t, f.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
			if err := c.Get(1, tc.path); err != nil {
				t.Fatal(err)
			}
			if tc.end == nil {
				for {
					fr, err := c.Framer.ReadFrame()
					if err != nil {
						t.Fatal(err)
					}
					if d, ok := fr.(*http2.DataFrame); ok && len(d.Data()) > 0 {
						_ = c.Framer.WriteWindowUpdate(0, uint32(len(d.Data())))
					}
					if rst, ok := fr.(*http2.RSTStreamFrame); ok {
						if rst.StreamID != 1 || rst.ErrCode != http2.ErrCodeInternal {
							t.Fatalf("RST_STREAM %d %v, want 1 INTERNAL_ERROR", rst.StreamID, rst.ErrCode)
						}
						break
					}
				}
				if err := c.Get(3, "/a"); err != nil {
					t.Fatal(err)
				}
				if status, body, err := c.Response(3); err != nil || status != "200" || string(body) != "small /a" {
					t.Fatalf("after the reset: %q %q %v", status, body, err)
				}
				ff.waitReleased(t)
				return
			}
			if _, err := c.FirstData(1); err != nil {
				t.Fatal(err)
			}
			tc.end(t, f, c)
			ff.waitReleased(t)
		})
	}
}

// A stream reset cancels its request's Context with ErrStreamReset while
// the connection's other streams go on; an answered stream's context ends
// with ErrStreamDone.
func TestH2ResetCancelsContext(t *testing.T) {
	ctxs := make(chan context.Context, 2)
	f := startServer(t, http.ServerConfig{}, func(req *http.Request) {
		ctx := req.Context()
		if req.Context() != ctx {
			t.Error("Context differs between two calls")
		}
		if req.Path != "/wait" {
			answerSized(req)
			ctxs <- ctx
			return
		}
		go func() {
			<-ctx.Done()
			ctxs <- ctx
			_ = http.Respond(req, http.OK("text/plain", []byte("late"))) // dropped: the stream is gone
		}()
	})
	c := h2test.Dial(t, f.addr)
	if err := c.Get(1, "/wait"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(3, "/size/10"); err != nil {
		t.Fatal(err)
	}
	if status, _, err := c.Response(3); err != nil || status != "200" {
		t.Fatalf("stream 3: %q %v", status, err)
	}
	done := <-ctxs
	if err := c.Framer.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	reset := <-ctxs // hang guard: the test's deadline
	if cause := context.Cause(reset); !errors.Is(cause, http.ErrStreamReset) {
		t.Errorf("reset stream's cause %v, want ErrStreamReset", cause)
	}
	<-done.Done() // hang guard: the test's deadline
	if cause := context.Cause(done); !errors.Is(cause, http.ErrStreamDone) {
		t.Errorf("answered stream's cause %v, want ErrStreamDone", cause)
	}
	if err := c.Get(5, "/size/20"); err != nil {
		t.Fatal(err)
	}
	if status, body, err := c.Response(5); err != nil || status != "200" || len(body) != 20 {
		t.Fatalf("after the reset: %q, %d bytes, %v", status, len(body), err)
	}
}

// A request still queued on its stage when the client resets its stream
// is dropped unhandled (its context has ended: stage's expiry), while the
// connection's other streams are served; the drop answers the stream
// (Request.Expired), which frees its slot at once: the answer is not sent
// and is counted as dropped.
func TestH2ResetRequestExpiresInQueue(t *testing.T) {
	release := make(chan struct{})
	var seen sync.Map
	f := startServer(t, http.ServerConfig{}, func(req *http.Request) {
		seen.Store(req.Seq, true)
		if req.Path == "/block" {
			<-release // both of the stage's threads wait here
		}
		answerSized(req)
	})
	c := h2test.Dial(t, f.addr)
	for _, id := range []uint32{1, 3} {
		if err := c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.Block("/block"), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	handled := func(id uint64) func() bool {
		return func() bool { _, ok := seen.Load(id); return ok }
	}
	waitUntil(t, "the blocking requests handled", handled(1))
	waitUntil(t, "the blocking requests handled", handled(3))
	if err := c.Get(5, "/size/10"); err != nil { // queued: both threads are busy
		t.Fatal(err)
	}
	waitUntil(t, "stream 5's request delivered", func() bool { return f.srv.Stats().Requests >= 3 })
	if err := c.Framer.WriteRSTStream(5, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the reset read", func() bool { return f.srv.Stats().HTTP2.ResetsIn >= 1 })
	close(release)
	for id, r := range c.Responses(1, 3) {
		if r.Err != nil || r.Status != "404" { // answerSized: /block is not a size
			t.Fatalf("stream %d: %q %v", id, r.Status, r.Err)
		}
	}
	st, _ := f.m.Stage("App")
	waitUntil(t, "stream 5's request dropped as expired", func() bool { return st.Stats().Expired >= 1 })
	if _, ok := seen.Load(uint64(5)); ok {
		t.Fatal("the reset stream's request reached the handler")
	}
	waitUntil(t, "stream 5 answered (dropped) on its expiry", func() bool { return f.srv.Stats().Dropped >= 1 })
}

// waitUntil polls cond until it holds; the deadline is a hang guard only.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

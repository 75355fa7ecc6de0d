package http_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/http"
)

// headerBufferBody is request i's body: its number and a run of one
// letter, of a length that varies from request to request, so that a
// reply formatted into a buffer the socket still holds for an earlier
// one shows as a wrong body.
func headerBufferBody(i int) string {
	n := (i*397)%6000 + 1
	return strconv.Itoa(i) + ":" + strings.Repeat(string(rune('a'+i%26)), n)
}

// sendReleasing answers req with a 200 of body sent with a Done that
// overwrites body, as a page's buffer could be reused once released, and
// then calls then (if set).
func sendReleasing(c *http.Connection, req *http.Request, body []byte, then func()) {
	resp := &http.Response{Status: http.StatusOK, Header: http.Header{{Name: "Content-Type", Value: "text/plain"}}, ContentLength: int64(len(body))}
	_ = c.Send(&http.Reply{Req: req, Resp: resp, Body: [][]byte{body}, Done: func(error) {
		for j := range body {
			body[j] = '#'
		}
		if then != nil {
			then()
		}
	}})
}

// TestHeaderBufferNotReusedWhileWritten: a connection formats its replies
// into one reused buffer (conn_headbuf.go) only while the socket holds
// no earlier reply in it, and a reply's Done, kept with the buffer while
// its body is written beside the header, is called once its bytes are
// written. A client pipelines 1,500 requests and reads nothing until it
// has sent them all, through small socket buffers, so that many replies
// wait in the socket's outbox by reference while later ones are
// formatted. Bodies of 1 to 6,000 bytes, under InlineBody (2 KiB) copied
// into the header's buffer, above it written beside it; a reply sent
// with a Done (as a cached page is) has its body overwritten by that
// Done, as a page's buffer could be reused once released. Every reply
// must arrive intact and in order, every Done be called once. Answered
// inline on the event loop and by a stage's two workers; run under
// -race, it also shows the buffer's hand-over ordered.
func TestHeaderBufferNotReusedWhileWritten(t *testing.T) {
	const requests = 1500
	tests := []struct {
		name         string
		inline, done bool
	}{
		{"inline", true, false},
		{"inline, Done", true, true},
		{"stage", false, false},
		{"stage, Done", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var conn atomic.Pointer[http.Connection]
			var dones atomic.Int64
			answer := func(req *http.Request) {
				c := req.Conn.(*http.Connection)
				conn.Store(c)
				i, err := strconv.Atoi(strings.TrimPrefix(req.Path, "/"))
				if err != nil {
					_ = http.Respond(req, http.StatusResponse(http.StatusNotFound))
					return
				}
				body := []byte(headerBufferBody(i))
				if !tc.done {
					_ = http.Respond(req, http.OK("text/plain", body))
					return
				}
				sendReleasing(c, req, body, func() { dones.Add(1) })
			}
			cfg := http.ServerConfig{MaxPipeline: requests, InlineBody: 2 << 10}
			cfg.Socket.SendBuffer = 64 << 10
			if tc.inline {
				cfg.Inline = func(req *http.Request) bool { answer(req); return true }
			}
			f := startServer(t, cfg, answer)
			c, err := net.Dial("tcp", f.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
			_ = c.SetDeadline(time.Now().Add(2 * time.Minute)) // a hang guard only
			var reqs strings.Builder
			for i := range requests {
				fmt.Fprintf(&reqs, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
			}
			if _, err := c.Write([]byte(reqs.String())); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			for i := range requests {
				resp, body := readResponse(t, br, "GET")
				if want := headerBufferBody(i); resp.StatusCode != 200 || body != want {
					t.Fatalf("reply %d: %d, %d bytes %.20q..., want 200, %d bytes %.20q...", i, resp.StatusCode, len(body), body, len(want), want)
				}
			}
			// The replies did wait in the outbox while later ones were
			// formatted (else this test shows nothing).
			if out := conn.Load().Socket().Stats().MaxOutstanding; out < 1<<20 {
				t.Fatalf("at most %d bytes waited in the outbox, want the socket to have held 1 MiB", out)
			}
			if tc.done {
				// A Done runs once its bytes are in the kernel, maybe
				// after this client read them: wait for the last ones.
				deadline := time.Now().Add(time.Minute) // a hang guard only
				for dones.Load() < requests && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				if n := dones.Load(); n != requests {
					t.Fatalf("%d Done calls, want %d", n, requests)
				}
			}
		})
	}
}

// TestLoopHeaderBufferSharedByConnections: the connections of one event
// loop format their replies into the loop's header buffer when it is
// free (conn_headbuf.go), taken by a compare-and-swap, and make their
// requests in the object of the last request recycled on the loop
// (Parser.loopSpare): inline answers on the loop and a stage's two
// workers answering other connections at the same moment must never
// write into the buffer while a reply it holds is still in the outbox,
// nor reuse a request still in use. Eight connections on one loop each send 300 requests in
// pipelined bursts of one to four; every third request is answered by
// the stage, the rest inline, some with a Done that overwrites the body
// once called. Every reply must arrive intact and in order, and the
// connections must have shared one loop buffer. Run under -race, it
// also shows the buffer's hand-overs ordered.
func TestLoopHeaderBufferSharedByConnections(t *testing.T) {
	const conns, requests = 8, 300
	answer := func(req *http.Request) {
		c := req.Conn.(*http.Connection)
		i, err := strconv.Atoi(strings.TrimPrefix(req.Path, "/"))
		if err != nil {
			_ = http.Respond(req, http.StatusResponse(http.StatusNotFound))
			return
		}
		body := []byte(headerBufferBody(i % 5))
		body = body[:min(len(body), 1500)] // under InlineBody: copied into the buffer
		if i%2 == 0 {
			_ = http.Respond(req, http.OK("text/plain", body))
			return
		}
		sendReleasing(c, req, body, nil)
	}
	cfg := http.ServerConfig{InlineBody: 2 << 10, RecycleInline: true}
	cfg.Socket.EventLoops = 1
	cfg.Inline = func(req *http.Request) bool {
		if strings.HasSuffix(req.Path, "0") || strings.HasSuffix(req.Path, "3") || strings.HasSuffix(req.Path, "6") || strings.HasSuffix(req.Path, "9") {
			return false // to the stage's workers
		}
		answer(req)
		return true
	}
	f := startServer(t, cfg, answer)
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	clients := make([]net.Conn, conns)
	for k := range conns {
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[k] = c
	}
	for k, c := range clients {
		wg.Go(func() {
			_ = c.SetDeadline(time.Now().Add(2 * time.Minute)) // a hang guard only
			br := bufio.NewReader(c)
			for i := 0; i < requests; {
				burst := min(1+(i+k)%4, requests-i)
				var reqs strings.Builder
				for j := range burst {
					fmt.Fprintf(&reqs, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", i+j)
				}
				if _, err := c.Write([]byte(reqs.String())); err != nil {
					errs <- err
					return
				}
				for j := range burst {
					resp, err := readResponseErr(br, "GET")
					if err != nil {
						errs <- fmt.Errorf("connection %d, reply %d: %w", k, i+j, err)
						return
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					want := headerBufferBody((i + j) % 5)
					want = want[:min(len(want), 1500)]
					if err != nil || resp.StatusCode != 200 || string(body) != want {
						errs <- fmt.Errorf("connection %d, reply %d: %d, %d bytes %.20q..., want 200, %d bytes %.20q... (%v)", k, i+j, resp.StatusCode, len(body), body, len(want), want, err)
						return
					}
				}
				i += burst
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Every connection's socket is on the one loop, which has the one
	// header buffer the replies were formatted into.
	var first any
	open := f.srv.Connections()
	for _, c := range open {
		v := c.Socket().LoopValue(func() any { return "made late" })
		if first == nil {
			first = v
		}
		if v != first {
			t.Errorf("connections on one loop have loop values %v and %v, want one shared value", first, v)
		}
	}
	if len(open) != conns {
		t.Errorf("%d connections open, want %d", len(open), conns)
	}
	if s, ok := first.(string); ok {
		t.Errorf("the loop's value was %q: the connections did not share their loop's memory", s)
	}
}

package http_test

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
)

// writeAsync writes parts on c from a goroutine the test waits for; write
// errors (the server closing after its answer) are expected and ignored.
// It does not half-close c: gnet closes a connection at the peer's FIN,
// dropping the responses not yet written.
func writeAsync(t *testing.T, c net.Conn, parts ...[]byte) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, b := range parts {
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	}()
	t.Cleanup(wg.Wait)
	t.Cleanup(func() { c.Close() }) // unblocks the writer first (cleanups run last-in first-out)
}

// A huge header after pipelined requests: every response to the requests
// before it arrives, then the 431, then a clean end of file (the lingering
// close keeps the reset from destroying responses the client has not read).
func TestPipelineThenHugeHeaderGetsEveryResponse(t *testing.T) {
	f := startServer(t, http.ServerConfig{Socket: aio.SocketConfig{LingerTimeout: time.Minute}}, echoPath)
	c, br := f.dial(t)
	var reqs strings.Builder
	const n = 40
	for i := range n {
		fmt.Fprintf(&reqs, "GET /r%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
	}
	huge := "GET /huge HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 1<<20) + "\r\n\r\n"
	writeAsync(t, c, []byte(reqs.String()), []byte(huge))
	for i := range n {
		resp, body := readResponse(t, br, "GET")
		if want := "GET /r" + strconv.Itoa(i); resp.StatusCode != 200 || body != want {
			t.Fatalf("response %d: %d %q, want 200 %q", i, resp.StatusCode, body, want)
		}
	}
	resp, _ := readResponse(t, br, "GET")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || !resp.Close {
		t.Fatalf("after the pipeline: %d close=%v, want 431 and close", resp.StatusCode, resp.Close)
	}
	expectEOF(t, br)
}

// A body nobody will read (SkipBody, a static file): the request is
// answered at once, the body is not buffered, the 100 Continue is not
// invited, and the client gets the answer and a clean close, not a reset.
func TestSkippedBodyAnsweredWithoutBuffering(t *testing.T) {
	f := startServer(t, http.ServerConfig{SkipBody: func(*http.Request) bool { return true },
		Socket: aio.SocketConfig{LingerTimeout: time.Minute}},
		func(req *http.Request) {
			resp := http.StatusResponse(http.StatusMethodNotAllowed)
			if len(req.Body) != 0 {
				resp = http.StatusResponse(http.StatusInternalServerError)
			}
			_ = http.Respond(req, resp)
		})
	t.Run("large POST", func(t *testing.T) {
		c, br := f.dial(t)
		head := "POST /file.html HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n\r\n"
		chunk := make([]byte, 1<<20)
		parts := [][]byte{[]byte(head)}
		for range 16 {
			parts = append(parts, chunk)
		}
		writeAsync(t, c, parts...) // 16 of the 100 MiB
		resp, _ := readResponse(t, br, "POST")
		if resp.StatusCode != http.StatusMethodNotAllowed || !resp.Close {
			t.Fatalf("got %d close=%v, want 405 and close", resp.StatusCode, resp.Close)
		}
		expectEOF(t, br)
	})
	t.Run("Expect 100-continue gets the final status", func(t *testing.T) {
		c, br := f.dial(t)
		fmt.Fprint(c, "POST /file.html HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\nExpect: 100-continue\r\n\r\n")
		resp, _ := readResponse(t, br, "POST")
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("got %d, want 405 (no 100 Continue)", resp.StatusCode)
		}
		expectEOF(t, br)
	})
	if st := f.srv.Stats(); st.Continues != 0 {
		t.Fatalf("Continues = %d, want 0", st.Continues)
	}
}

// Request bodies share a server-wide budget: a body beyond it gets 503
// with Retry-After (and a clean close); a small one is served.
func TestBodyBudget(t *testing.T) {
	f := startServer(t, http.ServerConfig{BodyBudget: 128 << 10, Socket: aio.SocketConfig{LingerTimeout: time.Minute}}, func(req *http.Request) {
		_ = http.Respond(req, http.OK("text/plain", []byte(strconv.Itoa(len(req.Body)))))
	})
	c, br := f.dial(t)
	fmt.Fprintf(c, "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 10000\r\n\r\n%s", strings.Repeat("b", 10000))
	if resp, body := readResponse(t, br, "POST"); resp.StatusCode != 200 || body != "10000" {
		t.Fatalf("small body: %d %q", resp.StatusCode, body)
	}
	writeAsync(t, c, []byte("POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n"), make([]byte, 1<<20))
	resp, _ := readResponse(t, br, "POST")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !resp.Close {
		t.Fatalf("big body: %d Retry-After=%q close=%v, want 503 with Retry-After and close",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Close)
	}
	if st := f.srv.Stats(); st.BodyRejected != 1 {
		t.Fatalf("BodyRejected = %d, want 1", st.BodyRejected)
	}
}

// CONNECT is answered 400 and the connection closed: it never carries
// other bytes.
func TestConnectClosesConnection(t *testing.T) {
	f := startServer(t, http.ServerConfig{}, echoPath)
	c, br := f.dial(t)
	fmt.Fprint(c, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, _ := readResponse(t, br, "CONNECT")
	if resp.StatusCode != http.StatusBadRequest || !resp.Close {
		t.Fatalf("got %d close=%v, want 400 and close", resp.StatusCode, resp.Close)
	}
	expectEOF(t, br)
}

// Clients that never read large responses hold no more than the socket's
// output budget (plus a small fair share each) in the server, are closed
// by the write timeout, and do not stop a normal client from being served.
func TestOutputBudgetAndWriteTimeout(t *testing.T) {
	const budget, clients = 256 << 10, 8
	big := make([]byte, 16<<20) // more than the kernel's buffers hold
	f := startServer(t, http.ServerConfig{
		Socket:       aio.SocketConfig{OutputBudget: budget, WriteWindow: 64 << 10, SendBuffer: 64 << 10},
		WriteTimeout: 300 * time.Millisecond,
	}, func(req *http.Request) {
		if req.Path == "/small" {
			echoPath(req)
			return
		}
		_ = req.Conn.(*http.Connection).Send(&http.Reply{Req: req,
			Resp: http.NewFileResponse(200, "application/octet-stream", int64(len(big))), Body: [][]byte{big}})
	})
	for range clients {
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
		defer c.Close()
		fmt.Fprint(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	}
	c, br := f.dial(t)
	fmt.Fprint(c, "GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, body := readResponse(t, br, "GET"); resp.StatusCode != 200 || body != "GET /small" {
		t.Fatalf("normal client: %d %q", resp.StatusCode, body)
	}
	limit := int64(budget + (clients+1)*4<<10)
	deadline := time.Now().Add(time.Minute) // bounds the test only
	for f.srv.Stats().WriteTimeouts < clients {
		if p := f.srv.Socket().Stats().OutputPending; p > limit {
			t.Fatalf("OutputPending = %d, over the budget's bound %d", p, limit)
		}
		if time.Now().After(deadline) {
			t.Fatalf("write timeouts: %d of %d", f.srv.Stats().WriteTimeouts, clients)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

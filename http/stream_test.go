package http_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	nethttp "net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
)

// pattern returns n bytes that differ from piece to piece.
func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((i*7 + seed) % 251)
	}
	return b
}

func TestStreamedReplyInOrder(t *testing.T) {
	reqs := make(chan *http.Request, 4)
	f := startServer(t, http.ServerConfig{}, func(req *http.Request) { reqs <- req })
	c, br := f.dial(t)
	fmt.Fprint(c, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n")
	r0, r1 := <-reqs, <-reqs
	if r0.Path != "/stream" {
		r0, r1 = r1, r0
	}
	conn := r0.Conn.(*http.Connection)

	const piece = 100 << 10 // three pieces: more than the write window
	pieces := [][]byte{pattern(piece, 0), pattern(piece, 1), pattern(piece-5, 2)}
	var want []byte
	for _, p := range pieces {
		want = append(want, p...)
	}
	s := conn.NewStream(int64(len(want)))
	done := make(chan error, len(pieces))
	// Each piece's completion writes the next, as a file reader would.
	var next func(i int) func(error)
	next = func(i int) func(error) {
		return func(err error) {
			done <- err
			if err == nil && i+1 < len(pieces) {
				_ = s.Write(pieces[i+1], next(i+1))
			}
		}
	}
	// The first piece is written before the reply is sent, and the next
	// request is answered before the stream ends: both must wait.
	if err := s.Write(pieces[0], next(0)); err != nil {
		t.Fatal(err)
	}
	if err := http.Respond(r1, http.OK("text/plain", []byte("after"))); err != nil {
		t.Fatal(err)
	}
	resp := http.NewFileResponse(200, "application/octet-stream", int64(len(want)))
	if err := conn.Send(&http.Reply{Req: r0, Resp: resp, Stream: s}); err != nil {
		t.Fatal(err)
	}

	got, body := readResponse(t, br, "GET")
	if got.StatusCode != 200 || !bytes.Equal([]byte(body), want) {
		t.Fatalf("streamed: %d, %d bytes (want %d, equal %v)", got.StatusCode, len(body), len(want), body == string(want))
	}
	if got, body := readResponse(t, br, "GET"); got.StatusCode != 200 || body != "after" {
		t.Fatalf("after the stream: %d %q", got.StatusCode, body)
	}
	for range pieces {
		if err := <-done; err != nil {
			t.Fatalf("piece done: %v", err)
		}
	}
	if err := s.Write([]byte("x"), nil); !errors.Is(err, http.ErrBadReply) {
		t.Fatalf("write past the end = %v, want ErrBadReply", err)
	}
}

func TestStreamMisuse(t *testing.T) {
	reqs := make(chan *http.Request, 4)
	f := startServer(t, http.ServerConfig{}, func(req *http.Request) { reqs <- req })
	c, br := f.dial(t)
	fmt.Fprint(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
	req := <-reqs
	conn := req.Conn.(*http.Connection)

	s := conn.NewStream(4)
	var doneErr error
	if err := s.Write([]byte("too long"), func(err error) { doneErr = err }); !errors.Is(err, http.ErrBadReply) || !errors.Is(doneErr, http.ErrBadReply) {
		t.Fatalf("piece past the length: %v, done(%v)", err, doneErr)
	}
	for name, reply := range map[string]http.Reply{
		"length mismatch": {Req: req, Resp: http.NewFileResponse(200, "", 5), Stream: s},
		"with a body":     {Req: req, Resp: http.NewFileResponse(200, "", 4), Body: [][]byte{[]byte("abcd")}, Stream: s},
		"other stream":    {Req: req, Resp: http.NewFileResponse(200, "", 4), Stream: (&http.Connection{}).NewStream(4)},
	} {
		if err := conn.Send(&reply); !errors.Is(err, http.ErrBadReply) {
			t.Errorf("%s: Send = %v, want ErrBadReply", name, err)
		}
	}
	// Aborted before its turn: the request gets 500 and the connection
	// closes.
	s.Abort(errors.New("disk on fire"))
	if err := conn.Send(&http.Reply{Req: req, Resp: http.NewFileResponse(200, "", 4), Stream: s}); err != nil {
		t.Fatal(err)
	}
	resp, _ := readResponse(t, br, "GET")
	if resp.StatusCode != 500 || !resp.Close {
		t.Fatalf("aborted stream: %d close=%v", resp.StatusCode, resp.Close)
	}
	expectEOF(t, br)
}

func TestStreamAbortedMidway(t *testing.T) {
	reqs := make(chan *http.Request, 4)
	f := startServer(t, http.ServerConfig{}, func(req *http.Request) { reqs <- req })
	c, br := f.dial(t)
	fmt.Fprint(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
	req := <-reqs
	conn := req.Conn.(*http.Connection)
	s := conn.NewStream(10)
	if err := conn.Send(&http.Reply{Req: req, Resp: http.NewFileResponse(200, "", 10), Stream: s}); err != nil {
		t.Fatal(err)
	}
	written := make(chan error, 1)
	_ = s.Write([]byte("abc"), func(err error) { written <- err })
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	s.Abort(nil)
	resp, err := readResponseErr(br, "GET")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if string(body) != "abc" || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("body %q, err %v; want the 3 bytes sent, then the connection closed", body, err)
	}
}

func TestStreamOnHEAD(t *testing.T) {
	reqs := make(chan *http.Request, 4)
	f := startServer(t, http.ServerConfig{}, func(req *http.Request) { reqs <- req })
	c, br := f.dial(t)
	fmt.Fprint(c, "HEAD /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	head, get := <-reqs, <-reqs
	if head.Method != "HEAD" {
		head, get = get, head
	}
	conn := head.Conn.(*http.Connection)
	s := conn.NewStream(1000)
	if err := conn.Send(&http.Reply{Req: head, Resp: http.NewFileResponse(200, "", 1000), Stream: s}); err != nil {
		t.Fatal(err)
	}
	if err := s.Write([]byte("x"), nil); !errors.Is(err, http.ErrBadReply) {
		t.Fatalf("Write on a bodiless response = %v, want ErrBadReply", err)
	}
	_ = http.Respond(get, http.OK("text/plain", []byte("b")))
	resp, body := readResponse(t, br, "HEAD")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Length") != "1000" || body != "" {
		t.Fatalf("HEAD: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if _, body := readResponse(t, br, "GET"); body != "b" {
		t.Fatalf("GET after HEAD: %q", body)
	}
}

func TestStalledStreamClosed(t *testing.T) {
	reqs := make(chan *http.Request, 4)
	f := startServer(t, http.ServerConfig{ResponseTimeout: 50 * time.Millisecond}, func(req *http.Request) { reqs <- req })
	c, br := f.dial(t)
	fmt.Fprint(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	r0, r1 := <-reqs, <-reqs
	if r0.Path != "/a" {
		r0, r1 = r1, r0
	}
	conn := r0.Conn.(*http.Connection)
	s := conn.NewStream(10)
	_ = s.Write([]byte("abc"), nil)
	_ = http.Respond(r1, http.OK("text/plain", []byte("b")))
	if err := conn.Send(&http.Reply{Req: r0, Resp: http.NewFileResponse(200, "", 10), Stream: s}); err != nil {
		t.Fatal(err)
	}
	// The rest never comes: the connection is closed, and the response
	// queued behind the stream never sent.
	resp, err := readResponseErr(br, "GET")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if string(body) != "abc" || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("body %q, err %v; want 3 bytes, then the connection closed", body, err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the stalled stream: %v, want EOF", err)
	}
	if n := f.srv.Stats().ResponseTimeouts; n != 1 {
		t.Fatalf("ResponseTimeouts = %d, want 1", n)
	}
}

// TestStreamLengthHeader checks the announced length of a streamed reply.
func TestStreamLengthHeader(t *testing.T) {
	f := startServer(t, http.ServerConfig{}, func(req *http.Request) {
		conn := req.Conn.(*http.Connection)
		s := conn.NewStream(5)
		_ = conn.Send(&http.Reply{Req: req, Resp: http.NewFileResponse(200, "text/plain", 5), Stream: s})
		_ = s.Write([]byte("he"), nil)
		_ = s.Write([]byte("llo"), nil)
	})
	c, br := f.dial(t)
	fmt.Fprint(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body := readResponse(t, br, "GET")
	if resp.Header.Get("Content-Length") != strconv.Itoa(5) || body != "hello" {
		t.Fatalf("got %v %q", resp.Header, body)
	}
}

// readResponseErr reads a response's header, leaving its body to the
// caller.
func readResponseErr(br *bufio.Reader, method string) (*nethttp.Response, error) {
	return nethttp.ReadResponse(br, &nethttp.Request{Method: method})
}

// A stream whose pieces are as large as the socket's write threshold: the
// first one, queued behind the header, is refused as clogging the socket
// while nothing the connection waits for is in flight. The connection
// must wait for the header to drain, not give up on the response.
func TestStreamPieceAtWriteThreshold(t *testing.T) {
	const threshold = 64 << 10
	reqs := make(chan *http.Request, 1)
	f := startServer(t, http.ServerConfig{Socket: aio.SocketConfig{
		WriteThreshold: aio.WriteThreshold{Bytes: threshold},
	}}, func(req *http.Request) { reqs <- req })
	c, br := f.dial(t)
	fmt.Fprint(c, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
	req := <-reqs
	conn := req.Conn.(*http.Connection)

	pieces := [][]byte{pattern(threshold, 0), pattern(threshold, 1), pattern(threshold-3, 2)}
	var want []byte
	for _, p := range pieces {
		want = append(want, p...)
	}
	s := conn.NewStream(int64(len(want)))
	done := make(chan error, len(pieces))
	// Every piece is written before the reply is sent, so that the first
	// one reaches the socket right behind the header.
	for _, p := range pieces {
		if err := s.Write(p, func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
	}
	resp := http.NewFileResponse(200, "application/octet-stream", int64(len(want)))
	if err := conn.Send(&http.Reply{Req: req, Resp: resp, Stream: s}); err != nil {
		t.Fatal(err)
	}
	got, body := readResponse(t, br, "GET")
	if got.StatusCode != 200 || !bytes.Equal([]byte(body), want) {
		t.Fatalf("streamed: %d, %d bytes of %d", got.StatusCode, len(body), len(want))
	}
	for range pieces {
		if err := <-done; err != nil {
			t.Fatalf("piece done: %v", err)
		}
	}
}

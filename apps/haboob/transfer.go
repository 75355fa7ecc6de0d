package haboob

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"sync"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
)

// transfer streams the bytes of one uncached file to one request: it
// opens the file through asyncFile, answers from the open file's metadata
// (200, 206 for a byte range, or a bodiless 304/416), and sends the bytes
// as an http.Stream of Chunk-sized pieces. At most two pieces are read or
// being written at a time: a piece's write completion requests the next
// read, so that a response holds at most two chunks of memory, however
// large the file and however slow the client.
//
// A connection's transfers run one after the other, in request order: a
// transfer opens its file only once the one before it on its connection
// (see cacheMiss.lines; an HTTP/2 connection's streams are spread over a
// few lines, see lineOf) has closed its own, so that a client pipelining
// requests for large files holds one open file and two pieces at a time,
// however many requests it sends and whether or not it reads.
//
// The file's completions are handled inline, on the asyncFile worker that
// runs the file's requests (transferEvent): they are short and never
// block, and asyncFile runs one file's requests, and delivers their
// completions, one at a time and in order, which keeps the pieces in
// order.
type transfer struct {
	h     *cacheMiss
	req   *http.Request
	conn  *http.Connection
	line  transferLine // the transfers it waits behind (cacheMiss.lines)
	path  string
	rep   rep   // what the responses say besides the bytes (validators from the open file)
	chunk int64 // the pieces' size

	mu     sync.Mutex
	file   *aio.File
	stream *http.Stream
	next   int64 // file offset of the next read to request
	end    int64 // offset just past the last byte to send
	got    int64 // file offset just past the last byte read
	pieces int   // pieces requested and not yet written to the kernel
	over   bool  // finished or failed

	// after is the connection's next transfer, started once this one is
	// over; guarded by h.mu.
	after *transfer
}

// stream answers req with the file at path, read piece by piece. info is
// the file's metadata from resolving the path (nil if unknown): an answer
// without a body (HEAD, 304, 416) comes from it without opening the file.
func (h *cacheMiss) stream(req *http.Request, path string, r rep, info fs.FileInfo) {
	conn, ok := req.Conn.(*http.Connection)
	if !ok {
		h.log.Warn("haboob: CacheMiss: request without a connection", "path", req.Path)
		return
	}
	if info != nil {
		if resp, _, n := fileResponse(req, info.Size(), repOf(r, info)); n == 0 {
			h.reply(req, resp)
			return
		}
	}
	t := &transfer{h: h, req: req, conn: conn, line: lineOf(conn, req), path: path, rep: r, chunk: h.chunkSize()}
	h.mu.Lock()
	if last := h.lines[t.line]; last != nil {
		last.after = t // its turn comes when last is over
		h.lines[t.line] = t
		h.mu.Unlock()
		return
	}
	h.lines[t.line] = t
	h.mu.Unlock()
	t.start()
}

// start opens the transfer's file, its turn come. On a connection that
// has closed meanwhile nobody would take the answer: the transfer ends
// without opening anything, and so do the ones after it.
func (t *transfer) start() {
	for ; t != nil; t = t.done() {
		if t.conn.Closed() {
			t.mu.Lock()
			t.over = true
			t.mu.Unlock()
			continue
		}
		if _, err := t.h.fio.Open(t.path, os.O_RDONLY, 0, aio.Func(transferEvent), t); err != nil {
			t.mu.Lock()
			t.over = true
			t.mu.Unlock()
			unavailable(t.req, t.h.args.RetryAfter)
			continue
		}
		return
	}
}

// done takes t, which is over, off its connection's line and returns the
// transfer whose turn it is now (nil: none).
func (t *transfer) done() *transfer {
	h := t.h
	h.mu.Lock()
	next := t.after
	t.after = nil
	if next == nil && h.lines[t.line] == t {
		delete(h.lines, t.line)
	}
	h.mu.Unlock()
	return next
}

// finished hands the connection over to the next transfer, once t is over
// and its file closed (or never opened).
func (t *transfer) finished() {
	if next := t.done(); next != nil {
		next.start()
	}
}

// opened starts the response once the file is open.
func (t *transfer) opened(f *aio.File, info fs.FileInfo) {
	resp, first, n := fileResponse(t.req, info.Size(), repOf(t.rep, info))
	t.mu.Lock()
	t.file = f
	if n == 0 {
		t.over = true
		t.mu.Unlock()
		_ = f.Close(t)
		t.h.reply(t.req, resp)
		t.finished()
		return
	}
	t.stream = t.conn.NewStream(n)
	t.next, t.got, t.end = first, first, first+n
	t.mu.Unlock()
	send(t.h.send, &http.Reply{Req: t.req, Resp: resp, Stream: t.stream, Done: t.replied}, t.h.args.RetryAfter)
	if first > 0 {
		if err := f.SeekTo(first, io.SeekStart, t); err != nil {
			t.fail(err)
			return
		}
	}
	t.readMore(2)
}

// replied learns the fate of the reply: an error means it was refused or
// its connection closed, and nobody will take the pieces.
func (t *transfer) replied(err error) {
	if err != nil {
		t.fail(err)
	}
}

// readMore requests up to k more pieces. The requests are made under
// t.mu: asyncFile reads at the file's offset, so requests must be queued
// in offset order.
func (t *transfer) readMore(k int) {
	var err error
	t.mu.Lock()
	for range k {
		if t.over || t.next >= t.end {
			break
		}
		n := min(t.chunk, t.end-t.next)
		if err = t.file.Read(int(n), t); err != nil {
			break
		}
		t.next += n
		t.pieces++
	}
	t.mu.Unlock()
	if err != nil {
		t.fail(err)
	}
}

// piece sends bytes read from the file.
func (t *transfer) piece(data []byte) {
	t.mu.Lock()
	want := min(t.chunk, t.end-t.got)
	t.got += int64(len(data))
	s, over := t.stream, t.over
	t.mu.Unlock()
	if over || s == nil {
		return
	}
	// An error is handed to written too.
	_ = s.Write(data, t.written)
	if int64(len(data)) < want {
		t.fail(fmt.Errorf("haboob: %s shrank while being sent", t.path))
	}
}

// written is a piece's completion: it has been written to the kernel (or
// dropped, with an error).
func (t *transfer) written(err error) {
	if err != nil {
		t.fail(err)
		return
	}
	t.mu.Lock()
	t.pieces--
	if !t.over && t.next >= t.end && t.pieces == 0 {
		t.over = true
		f := t.file
		t.mu.Unlock()
		_ = f.Close(t)
		t.finished()
		return
	}
	t.mu.Unlock()
	t.readMore(1)
}

// fail ends the transfer: the stream is aborted (the client gets a 500 if
// nothing was sent yet, else a short body and a closed connection) and the
// file closed.
// It runs the stream's callbacks, so it must not be called with t.mu held.
func (t *transfer) fail(err error) {
	t.mu.Lock()
	if t.over {
		t.mu.Unlock()
		return
	}
	t.over = true
	s, f := t.stream, t.file
	t.mu.Unlock()
	t.h.log.Debug("haboob: file transfer ended early", "path", t.path, "err", err)
	if s != nil {
		s.Abort(err)
	}
	if f != nil {
		_ = f.Close(t)
	}
	t.finished()
}

// openFailed answers a request whose file could not be opened.
func (t *transfer) openFailed(err error) {
	t.mu.Lock()
	t.over = true
	t.mu.Unlock()
	t.h.reply(t.req, errorResponse(t.h.log, t.path, err)())
	t.finished()
}

// transferEvent handles the completions of transfers' files: a callback,
// run on the asyncFile worker (see transfer).
func transferEvent(e sink.Event) error {
	switch ev := e.(type) {
	case aio.IOCompleted:
		t, ok := ev.Tag.(*transfer)
		if !ok {
			return nil
		}
		switch ev.Op {
		case aio.OpOpen:
			t.opened(ev.File, ev.Info)
		case aio.OpRead:
			t.piece(ev.Data)
		}
	case aio.EOF:
		if t, ok := ev.Tag.(*transfer); ok {
			t.fail(fmt.Errorf("haboob: %s shrank while being sent", t.path))
		}
	case aio.IOError:
		t, ok := ev.Tag.(*transfer)
		switch {
		case !ok:
		case ev.Op == aio.OpOpen:
			t.openFailed(ev.Err)
		case ev.Op != aio.OpClose:
			t.fail(ev)
		}
	}
	return nil
}

// fileResponse decides the answer to a GET or HEAD of a file of size
// bytes described by r: a 304 for a conditional request that matches, a
// 416 or a 206 for a byte range, else a 200. first and n are the bytes of
// the file to send after the header (n == 0: none).
func fileResponse(req *http.Request, size int64, r rep) (resp *http.Response, first, n int64) {
	if NotModified(req, r.v) {
		return &http.Response{Status: http.StatusNotModified, Header: r.notModifiedHeader()}, 0, 0
	}
	if req.Method == "GET" {
		br, partial, err := ParseRange(req, size, r.v)
		switch {
		case err != nil:
			resp := http.StatusResponse(http.StatusRangeNotSatisfiable)
			resp.Header.Add("Content-Range", "bytes */"+strconv.FormatInt(size, 10))
			return resp, 0, 0
		case partial:
			resp := http.PartialContent(r.ctype, br.First, br.Last, size, nil)
			resp.Header = r.encodingFields(resp.Header)
			resp.Header = append(validatorFields(resp.Header, r.v), http.Field{Name: "Accept-Ranges", Value: "bytes"})
			return resp, br.First, br.Length()
		}
	}
	resp = &http.Response{Status: http.StatusOK, Header: r.header(), ContentLength: size}
	if !resp.SendsBody(req) {
		return resp, 0, 0
	}
	return resp, 0, size
}

package http

import (
	"fmt"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/sink"
)

// This file is a Connection's output owner (replies): answers put in
// order, formatted and written into the socket's outbox, by whichever
// goroutine answers.

func (c *Connection) reply(r Reply) error {
	if h := c.h2.Load(); h != nil {
		return h.reply(r)
	}
	if err := c.check(r); err != nil {
		r.refuse(err)
		return err
	}
	c.mu.Lock()
	err := c.answerLocked(r.Req.Seq, r)
	if (c.ready.Len() > 0 || len(c.held) > 0 && !c.readDone) && !c.pumping {
		c.pump(0) // the pipeline has room again
		return err
	}
	c.unlock()
	return err
}

func (c *Connection) check(r Reply) error {
	switch {
	case r.Req == nil:
		return fmt.Errorf("%w: no request", ErrBadReply)
	case r.Resp == nil:
		return fmt.Errorf("%w: no response", ErrBadReply)
	case r.Req.Conn != c:
		return fmt.Errorf("%w: request of connection %v answered on %s", ErrBadReply, r.Req.Conn, c)
	}
	if f := r.Resp.File; f != nil {
		switch {
		case f.File == nil || f.Offset < 0 || f.Length < 0:
			return fmt.Errorf("%w: file body without a file or with a negative region", ErrBadReply)
		case r.Stream != nil || r.Resp.Body != nil || r.Body != nil:
			return fmt.Errorf("%w: a file body with another body", ErrBadReply)
		case f.Length != max(r.Resp.ContentLength, 0):
			return fmt.Errorf("%w: file body of %d bytes for Content-Length %d", ErrBadReply, f.Length, r.Resp.ContentLength)
		}
		return nil
	}
	if s := r.Stream; s != nil {
		switch {
		case s.c != c:
			return fmt.Errorf("%w: stream of another connection", ErrBadReply)
		case r.Resp.Body != nil || r.Body != nil:
			return fmt.Errorf("%w: a streamed reply with a body", ErrBadReply)
		case s.length != max(r.Resp.ContentLength, 0):
			return fmt.Errorf("%w: stream of %d bytes for Content-Length %d", ErrBadReply, s.length, r.Resp.ContentLength)
		}
		return nil
	}
	if r.Resp.Body == nil && r.Resp.SendsBody(r.Req) {
		var n int64
		for _, b := range r.Body {
			n += int64(len(b))
		}
		if n != max(r.Resp.ContentLength, 0) {
			return fmt.Errorf("%w: body of %d bytes for Content-Length %d", ErrBadReply, n, r.Resp.ContentLength)
		}
	}
	return nil
}

func (c *Connection) closedErr() error {
	return fmt.Errorf("http: connection closed: %w", &sink.ClosedError{Sink: c.String()})
}

// answerLocked records the answer to request seq and sends every answer
// now in order.
func (c *Connection) answerLocked(seq uint64, r Reply) error {
	if s := r.Stream; s != nil {
		if s.bound {
			err := fmt.Errorf("%w: a stream sent with two replies", ErrBadReply)
			c.calls = append(c.calls, doneCall{r.Done, err})
			return err
		}
		s.bound = true
	}
	var err error
	switch {
	case c.closed:
		c.dropLocked(r, c.closedErr())
		return c.closedErr()
	case seq < c.nextOut || seq >= c.nextIn:
		err = fmt.Errorf("%w: request %d of %s is answered already or unknown", ErrBadReply, seq, c)
	case seq != c.nextOut || c.stream != nil:
		if _, dup := c.pending[seq]; dup {
			err = fmt.Errorf("%w: request %d of %s answered twice", ErrBadReply, seq, c)
			break
		}
		if c.pending == nil {
			c.pending = make(map[uint64]Reply)
		}
		c.pending[seq] = r
		return nil
	}
	if err != nil {
		c.calls = append(c.calls, doneCall{r.Done, err})
		c.dropStreamLocked(r.Stream, err)
		r.Resp.release()
		return err
	}
	c.emitLocked(r)
	c.emitPendingLocked()
	return nil
}

// emitPendingLocked emits the answers that waited for earlier ones, in
// order, until one is missing or a stream is being sent.
func (c *Connection) emitPendingLocked() {
	for c.stream == nil && len(c.pending) > 0 {
		next, ok := c.pending[c.nextOut]
		if !ok {
			break
		}
		delete(c.pending, c.nextOut)
		c.emitLocked(next)
	}
}

func (c *Connection) dropLocked(r Reply, err error) {
	c.srv.stats.dropped.Add(1)
	c.dropStreamLocked(r.Stream, err)
	r.Resp.release()
	if r.Done != nil {
		c.calls = append(c.calls, doneCall{r.Done, err})
	}
}

// dropPendingLocked fails the replies still waiting for their turn: the
// connection closed before they could be sent.
func (c *Connection) dropPendingLocked() {
	c.wantCont = false
	if len(c.pending) == 0 {
		return // the usual close: no error to build
	}
	err := fmt.Errorf("http: %s closed before the reply was sent: %w", c, &sink.ClosedError{Sink: c.String()})
	for seq, r := range c.pending {
		delete(c.pending, seq)
		c.dropLocked(r, err)
	}
}

// emitLocked formats the answer to request nextOut and writes it into
// the socket's outbox.
func (c *Connection) emitLocked(r Reply) {
	c.nextOut++
	var arrived int64 // sink.Nanotime of the request's arrival (0: unknown)
	if w, ok := c.waitq.Pop(); ok {
		arrived = w.at
	}
	if c.closing {
		c.dropLocked(r, fmt.Errorf("http: %s is closing: %w", c, &sink.ClosedError{Sink: c.String()}))
		return
	}
	srv := c.srv
	req, resp := r.Req, r.Resp
	if s := r.Stream; s != nil && s.err != nil {
		// Aborted before its turn: nothing of it was sent yet.
		resp = InternalServerError()
		resp.Close = true
		r.Stream = nil
	}
	if (c.overLimit || srv.draining.Load()) && resp.KeepAlive(req) {
		cp := *resp
		cp.Close = true
		resp = &cp
	}
	if req != nil {
		c.releaseBodyLocked(req)
		// A tracked reply's Done (its admission's completion) may read the
		// request until the bytes are written: not recycled (recycleLocked).
		req.heldByReply = r.tracked
	}
	if resp.File != nil && srv.cfg.Socket.TLS != nil && resp.SendsBody(req) {
		resp = readFileBody(resp) // encrypted in user space: no sendfile
	}
	now := c.wallNow()
	inline := srv.cfg.InlineBody
	sends := resp.SendsBody(req)
	var w outWrite
	copied := true // the reply's buffers are not needed after formatting
	// The header goes into the connection's buffer while no earlier
	// write holds it (see headerBuffer), unless the reply's Done also
	// completes its admission.
	lendable := !r.tracked
	if c.header.done == nil {
		c.header.init() // at the first reply (HTTP/2 has its own writer)
	}
	// One decision first: a body sent here (not a file, not a stream's
	// pieces) that is small enough is copied into the header's buffer;
	// the buffer is taken once, sized for what goes into it.
	bodyLen := int(resp.ContentLength)
	if resp.Body != nil {
		bodyLen = len(resp.Body)
	}
	copyBody := sends && resp.File == nil && r.Stream == nil && bodyLen <= inline
	size := headerSize(resp)
	if copyBody {
		size += bodyLen
	}
	buf, from := c.replyBuffer(lendable, size)
	w.data = srv.format.AppendHeader(buf, resp, req, now)
	switch {
	case resp.File != nil && sends:
		w.file, w.off, w.n = resp.File.File, resp.File.Offset, resp.File.Length // the reference goes with it
		copied = false
	case !sends, r.Stream != nil:
		r.Resp.release()
	case copyBody && resp.Body != nil:
		w.data = append(w.data, resp.Body...)
	case copyBody:
		for _, b := range r.Body {
			w.data = append(w.data, b...)
		}
	case resp.Body != nil:
		w.bufs = [][]byte{resp.Body}
		copied = false
	default:
		w.bufs = r.Body
		copied = false
	}
	if copied && !r.tracked {
		c.calls = append(c.calls, doneCall{r.Done, nil})
	} else {
		w.done = r.Done // when the bytes are written (or dropped)
	}
	if lendable {
		w.done = c.lendReply(w.data, from, w.done)
	}
	if err := c.writeLocked(w); err != nil {
		c.dropStreamLocked(r.Stream, err)
		return
	}
	if c.lastAct = c.mono; c.lastAct == 0 {
		c.lastAct = sink.Nanotime()
	}
	srv.stats.responses.Add(1)
	if class := resp.status() / 100; class >= 1 && class <= 5 {
		srv.stats.byClass[class].Add(1)
	}
	if srv.cfg.OnResponse != nil {
		c.recordLocked(req, resp, sends, arrived, now)
	}
	if r.Stream != nil {
		c.startStreamLocked(r.Stream, sends)
	}
	if !resp.KeepAlive(req) {
		c.closing = true
		c.stopReadingLocked()
		c.dropPendingLocked()
		return
	}
	if c.wantCont && c.contSeq == c.nextOut && c.stream == nil {
		c.pushContinueLocked()
	}
}

// recordLocked tells ServerConfig.OnResponse about a response just
// handed to the socket.
func (c *Connection) recordLocked(req *Request, resp *Response, sends bool, arrived int64, now time.Time) {
	rec := AccessRecord{
		RemoteAddr: c.sock.RemoteAddr(),
		Time:       now,
		Status:     resp.status(),
		TLS:        c.srv.cfg.Socket.TLS != nil,
	}
	if sends {
		rec.Bytes = resp.length()
	}
	if arrived != 0 {
		rec.Duration = time.Duration(sink.Nanotime() - arrived)
	}
	if req != nil {
		rec.Method, rec.Target, rec.Proto = req.Method, req.Target, req.Proto
		rec.Referer, rec.UserAgent = req.Header.Get("Referer"), req.Header.Get("User-Agent")
		if !req.Received.IsZero() {
			rec.Time = req.Received
		}
	}
	c.srv.cfg.OnResponse(rec)
}

// readFileBody returns resp with its file body read into memory (a TLS
// connection encrypts it), the file's reference released; if the file
// cannot be read, a 500 that closes the connection.
func readFileBody(resp *Response) *Response {
	f := resp.File
	body := make([]byte, f.Length)
	n, _ := f.File.ReadAt(body, f.Offset) // short only on an error
	f.File.Release()
	if int64(n) < f.Length {
		failed := InternalServerError()
		failed.Close = true
		return failed
	}
	cp := *resp
	cp.File, cp.Body = nil, body
	return &cp
}

func headerSize(r *Response) int { return 160 + 40*len(r.Header) }

// writeLocked writes w into the socket's outbox, behind everything
// written before it, with c.mu held: the lock order is c.mu, then the
// outbox's leaf lock, and Write never runs w.done itself, so replies
// reach the socket in the order they are emitted with no queue here.
// If the socket refuses w (it is closing or closed) w is dropped, its
// done is called with the error, the connection fails and the error is
// returned.
//
// What the one queue saves: the connection used to fill an outq under
// mu, swap it out, hand it over outside mu and take mu again, with a
// flushing flag so that one goroutine at a time did so; now a reply costs
// one acquisition of mu and one of the outbox's lock, and no slices.
// What it costs: mu is held during Write, which may queue a task for the
// event loop (gnet's AsyncWrite, one eventfd write when the loop sleeps).
func (c *Connection) writeLocked(w outWrite) error {
	var err error
	if w.file != nil {
		err = c.sock.WriteFile(w.data, w.file, w.off, w.n, w.done) // releases w.file
	} else {
		err = c.sock.Write(w.data, w.bufs, w.done)
	}
	if err == nil {
		return nil
	}
	c.srv.stats.dropped.Add(1)
	if w.done != nil {
		c.calls = append(c.calls, doneCall{w.done, err})
	}
	c.failLocked(err)
	return err
}

// failLocked gives up on every answer not yet written: the connection
// cannot send. (What the outbox holds already it fails itself.)
func (c *Connection) failLocked(err error) {
	c.dropStreamLocked(c.stream, err)
	c.closing = true
	c.stopReadingLocked()
	c.dropPendingLocked()
}

// unlock closes the socket once the connection has sent its last
// response (closing, no stream being sent: the outbox's graceful close
// then waits until every byte written into it is in the kernel),
// releases c.mu and runs the Done callbacks collected under it.
func (c *Connection) unlock() {
	if c.closing && c.stream == nil && !c.closed && !c.sock.Closing() {
		if c.linger {
			_ = c.sock.Linger()
		} else {
			_ = c.sock.Close()
		}
	}
	// The callbacks run after Unlock, from a copy on the stack (a few are
	// the rule: a reply's page to release), so that c.calls keeps its
	// array for the next ones: no allocation per response.
	var stack [4]doneCall
	calls := append(stack[:0], c.calls...)
	clear(c.calls)
	c.calls = c.calls[:0]
	c.mu.Unlock()
	for _, d := range calls {
		finish(d.f, d.err)
	}
}

// ---- socket events ----

func (c *Connection) onClosed(ev aio.SinkClosed) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	if ev.Reason == aio.ClosedWriteTimeout {
		c.srv.stats.writeTimeouts.Add(1)
	}
	// The close's error is built only for those who receive it: a stream
	// being sent now, the requests' context (now if one was made, else
	// when one is asked for). Most connections close with neither.
	var err error
	if s := c.stream; s != nil && s.err == nil {
		err = c.closeError(ev)
	}
	c.failLocked(err)
	c.releaseBodiesLocked()
	c.unlock()
	c.life.closeFrom(c, ev, err)
	c.srv.remove(c)
}

// closeError is the error of a connection closed by ev.
func (c *Connection) closeError(ev aio.SinkClosed) error {
	err := c.closedErr()
	if ev.Err != nil {
		err = fmt.Errorf("%w (%s: %w)", err, ev.Reason, ev.Err)
	}
	return err
}

package http

import (
	"fmt"

	"github.com/sandstorm-go/sandstorm/sink"
)

// Stream is the payload of a streamed reply: a body the application
// produces piece by piece (a large file read in chunks) instead of handing
// it over whole. Get one from Connection.NewStream with the body's length,
// send a Reply whose Stream it is (Resp.ContentLength the same length,
// Resp.Body and Reply.Body nil), and Write the pieces in order. Each
// piece's done is called once the piece has been written to the kernel or
// dropped; that is the application's cue to produce the next one, so that
// keeping a fixed number of pieces outstanding bounds the memory a
// response holds whatever its length. Pieces written before the reply's
// turn on the connection (earlier pipelined responses still unsent) wait
// with it; responses to later requests wait until the stream has all its
// bytes.
//
// A stream whose response carries no body (HEAD, 304) ends at once: Write
// then fails with ErrBadReply. Abort gives up on a stream the application
// cannot finish. A stream that receives no piece for the server's
// ResponseTimeout while its connection has nothing else to write aborts
// its connection.
//
// A Stream's methods are safe for concurrent use; Write calls must still
// come in body order.
type Stream struct {
	c      *Connection
	length int64
	// The fields below are guarded by c.mu.
	left    int64 // bytes the application has not written yet
	bound   bool  // a reply carries it
	emitted bool  // its header is out: pieces go straight to the output
	err     error // dropped or aborted
	pieces  []outWrite
}

// NewStream returns a Stream for a reply on c whose body is length bytes.
func (c *Connection) NewStream(length int64) *Stream {
	return &Stream{c: c, length: max(length, 0), left: max(length, 0)}
}

// Len is the body's length.
func (s *Stream) Len() int64 { return s.length }

// Write appends b to the body. b must not change until done (if not nil)
// has been called: with nil once b is written to the kernel, or with an
// error if it is dropped (the connection closed, the stream was aborted,
// or b runs past the body's length, an ErrBadReply). The returned error is
// the one given to done. Write never blocks.
func (s *Stream) Write(b []byte, done func(error)) error {
	c := s.c
	if h := c.h2.Load(); h != nil {
		return h.streamWrite(s, b, done)
	}
	c.mu.Lock()
	var err error
	switch {
	case s.err != nil:
		err = s.err
	case c.closed:
		err = c.closedErr()
	case int64(len(b)) > s.left:
		err = fmt.Errorf("%w: stream piece of %d bytes with %d left of %d", ErrBadReply, len(b), s.left, s.length)
	}
	if err != nil {
		c.calls = append(c.calls, doneCall{done, err})
		c.unlock()
		return err
	}
	s.left -= int64(len(b))
	w := outWrite{data: b, done: done}
	if !s.emitted {
		s.pieces = append(s.pieces, w)
		c.unlock()
		return nil
	}
	if c.stream == s {
		now := sink.Nanotime()
		c.lastAct, c.streamAt = now, now
		if err := c.writeLocked(w); err != nil {
			c.unlock()
			return err
		}
		if s.left == 0 {
			c.endStreamLocked()
		}
	} else {
		c.calls = append(c.calls, doneCall{done, nil}) // an empty piece of a finished stream
	}
	c.unlock()
	return nil
}

// Abort gives up on the stream: err (nil: a generic error) is given to
// the pieces not yet written. If the response's header has not been sent
// yet, the request is answered 500 instead and the connection closed;
// otherwise the connection is closed after the bytes already queued, so
// the client sees a body shorter than announced. Abort does nothing once
// every byte has been written.
func (s *Stream) Abort(err error) {
	if err == nil {
		err = fmt.Errorf("http: stream aborted")
	}
	c := s.c
	if h := c.h2.Load(); h != nil {
		h.streamAbort(s, err)
		return
	}
	c.mu.Lock()
	if s.err != nil || s.emitted && c.stream != s && s.left == 0 {
		c.mu.Unlock()
		return
	}
	s.err = err
	s.failPiecesLocked(err)
	if c.stream == s {
		c.stream = nil
		c.closing = true
		c.stopReadingLocked()
		c.dropPendingLocked()
	}
	c.unlock()
}

// failPiecesLocked drops the pieces waiting for the stream's turn.
func (s *Stream) failPiecesLocked(err error) {
	for _, w := range s.pieces {
		if w.done != nil {
			s.c.calls = append(s.c.calls, doneCall{w.done, err})
		}
	}
	s.pieces = nil
}

// startStreamLocked follows the header of a streamed reply with the
// pieces written so far; sends is false for a response without a body.
func (c *Connection) startStreamLocked(s *Stream, sends bool) {
	s.emitted = true
	if !sends {
		s.err = fmt.Errorf("%w: the response has no body", ErrBadReply)
		s.failPiecesLocked(s.err)
		return
	}
	c.stream = s
	c.streamAt = sink.Nanotime()
	pieces := s.pieces
	s.pieces = nil
	for i, w := range pieces {
		if err := c.writeLocked(w); err != nil {
			// The connection failed (and dropped the stream): the pieces
			// after this one are dropped too.
			for _, w := range pieces[i+1:] {
				c.srv.stats.dropped.Add(1)
				if w.done != nil {
					c.calls = append(c.calls, doneCall{w.done, err})
				}
			}
			return
		}
	}
	if s.left == 0 && c.stream == s {
		c.stream = nil // complete already; the caller emits what follows
	}
}

// endStreamLocked notes that the current stream has all its bytes queued:
// the responses after it may go.
func (c *Connection) endStreamLocked() {
	c.stream = nil
	if c.closing {
		return
	}
	if c.wantCont && c.contSeq == c.nextOut {
		c.pushContinueLocked()
	}
	c.emitPendingLocked()
}

// dropStreamLocked ends the stream of a reply that will not be sent, and
// the current stream if the connection fails.
func (c *Connection) dropStreamLocked(s *Stream, err error) {
	if s == nil || s.err != nil {
		return
	}
	s.err = err
	s.failPiecesLocked(err)
	if c.stream == s {
		c.stream = nil
	}
}

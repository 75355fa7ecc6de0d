package http

import "sync/atomic"

// maxHeaderBuffer is the largest header buffer kept for later replies: a
// response header and a small body copied into it (the server's
// InlineBody) take a few hundred bytes to a few KiB.
const maxHeaderBuffer = 4 << 10

// headerBuffer is a reusable buffer for a reply's formatted header (and
// the small body copied into it), so that a keep-alive connection's
// replies do not allocate one each. There are two kinds: each event
// loop's (shared by the connections it serves, found through
// aio.Connection.LoopValue) and each Connection's own. A reply takes the
// loop's if it is free, else its connection's, else a new array: the
// loop's stays in the loop's CPU cache, where at 1024 connections a
// connection's own buffer is cold memory on every request, a miss for
// each of the lines the header and body are written into (docs/
// haboob-bench.md, "Cutting the cold lines"). A reply written on the
// event loop, as an inline answer is, is in the kernel by the end of the
// loop's turn, and the loop's buffer free again for the next connection.
//
// The outbox holds written bytes by reference until it calls the write's
// done, so a buffer is lent to one write at a time: taken (busy, a
// compare-and-swap: the loop's buffer is shared) when a reply is
// formatted into it, until the outbox's done (written, or dropped with
// the connection) frees it. A reply that finds both taken (pipelined
// replies, a client not reading, another connection of the loop writing
// at once) gets an array of its own, as before.
//
// The write's done is the buffer's, made once: no closure per reply. The
// reply's own Done, if its buffers are written beside the header (a
// cached page written with writev), is kept in then while the buffer is
// lent, and called by done.
//
// buf and then are set by the goroutine that took the buffer, before the
// write is handed to the outbox, and read by done after the outbox took
// it; busy orders them: the outbox's last use of the bytes (and done's
// use of then) before their reuse.
type headerBuffer struct {
	buf  []byte
	then func(error) // the lent write's reply's Done
	busy atomic.Bool
	done func(error) // frees the buffer, then calls then
}

// init makes the buffer's done (once, before its first use).
func (h *headerBuffer) init() {
	h.done = func(err error) {
		then := h.then
		h.then = nil
		h.busy.Store(false)
		finish(then, err)
	}
}

// get returns the buffer, emptied and taken, if it is free and has room
// for size bytes.
func (h *headerBuffer) get(size int) ([]byte, bool) {
	if !h.busy.CompareAndSwap(false, true) {
		return nil, false
	}
	if cap(h.buf) < size {
		h.busy.Store(false)
		return nil, false
	}
	return h.buf[:0], true
}

// lend is called with the formatted bytes b when they go to the outbox,
// then being the Done of the write (nil: none). taken says b was
// formatted into h's buffer (get returned it). It returns the done to
// write b with and true if h is lent for it: h's own array, or a new one
// h adopts (free, larger than h's, at most maxHeaderBuffer); else it
// returns then and false, and h is free (a taken buffer the formatting
// outgrew and that does not adopt the new array is free again).
func (h *headerBuffer) lend(b []byte, taken bool, then func(error)) (func(error), bool) {
	if taken && cap(b) == cap(h.buf) && len(b) > 0 && &b[0] == &h.buf[:1][0] {
		h.then = then
		return h.done, true
	}
	if !taken && !h.busy.CompareAndSwap(false, true) {
		return then, false
	}
	if cap(b) <= cap(h.buf) || cap(b) > maxHeaderBuffer || len(b) == 0 {
		h.busy.Store(false)
		return then, false
	}
	h.buf = b
	h.then = then
	return h.done, true
}

// replyBuffer returns an empty buffer with room for size bytes to format
// a reply into, and the header buffer it was taken from: the loop's if
// free, else the connection's (nil: a new array, or lendable is false).
func (c *Connection) replyBuffer(lendable bool, size int) ([]byte, *headerBuffer) {
	if !lendable {
		return make([]byte, 0, size), nil
	}
	if lb := c.loopHeaderLocked(); lb != nil {
		if b, ok := lb.get(size); ok {
			return b, lb
		}
	}
	if b, ok := c.header.get(size); ok {
		return b, &c.header
	}
	return make([]byte, 0, size), nil
}

// lendReply returns the done to write a reply's formatted bytes b with,
// from lendable buffer from (nil: a new array, which the loop's buffer or
// the connection's adopts if it can), then being the write's Done.
func (c *Connection) lendReply(b []byte, from *headerBuffer, then func(error)) func(error) {
	if from != nil {
		if done, ok := from.lend(b, true, then); ok {
			return done
		}
	}
	if lb := c.loopHeaderLocked(); lb != nil {
		if done, ok := lb.lend(b, false, then); ok {
			return done
		}
	}
	done, _ := c.header.lend(b, false, then)
	return done
}

// loopShared is what the connections of one event loop share (the
// loop's aio.Connection.LoopValue): memory they use one at a time, warm
// in the loop's cache.
type loopShared struct {
	header headerBuffer
	// spare is a recycled request's object (Parser.loopSpare).
	spare atomic.Pointer[requestHead512]
}

// joinLoop finds the connection's event loop's shared memory, at the
// connection's start (a socket not on an event loop yet has none).
func (c *Connection) joinLoop() {
	if c.sock == nil {
		return // a test's connection without a socket
	}
	ls, _ := c.sock.LoopValue(func() any {
		ls := &loopShared{}
		ls.header.init()
		return ls
	}).(*loopShared)
	if ls != nil {
		c.loopHeader = &ls.header
		c.parser.loopSpare = &ls.spare
	}
}

// loopHeaderLocked returns the header buffer of the connection's event
// loop (nil if it has none); c.mu is held.
func (c *Connection) loopHeaderLocked() *headerBuffer { return c.loopHeader }

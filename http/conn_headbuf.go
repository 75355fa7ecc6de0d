package http

import "sync/atomic"

// maxHeaderBuffer is the largest header buffer a Connection keeps for its
// next replies: a response header and a small body copied into it (the
// server's InlineBody) take a few hundred bytes to a few KiB.
const maxHeaderBuffer = 4 << 10

// headerBuffer is a Connection's reusable buffer for a reply's formatted
// header (and the small body copied into it), so that a keep-alive
// connection's replies do not allocate one each. The outbox holds written
// bytes by reference until it calls the write's done, so the buffer is
// lent to one write at a time: busy from the moment a reply is formatted
// into it until the outbox's done (written, or dropped with the
// connection) frees it. A reply emitted while it is lent (pipelined
// replies, a client not reading) gets a buffer of its own, as before.
//
// The write's done is the buffer's, made once per connection: no closure
// per reply. The reply's own Done, if its buffers are written beside the
// header (a cached page written with writev), is kept in then while the
// buffer is lent, and called by done (one write holds the buffer at a
// time, so one Done is kept at a time).
//
// buf and then are set under the Connection's mu before the write is
// handed to the outbox and read by done after the outbox took it; busy is
// set under mu and cleared by done on the socket's goroutines: the atomic
// orders the outbox's last use of the bytes (and done's use of then)
// before their reuse.
type headerBuffer struct {
	buf  []byte
	then func(error) // the lent write's reply's Done
	busy atomic.Bool
	done func(error) // frees the buffer, then calls then
}

// init makes the buffer's done (once, at the connection's first reply).
func (h *headerBuffer) init() {
	h.done = func(err error) {
		then := h.then
		h.then = nil
		h.busy.Store(false)
		finish(then, err)
	}
}

// get returns an empty buffer with room for size bytes: the connection's
// own, lent from now on, if it is free and large enough (own), else a new
// one.
func (h *headerBuffer) get(size int) (b []byte, own bool) {
	if cap(h.buf) >= size && !h.busy.Load() {
		h.busy.Store(true)
		return h.buf[:0], true
	}
	return make([]byte, 0, size), false
}

// lend is called with the formatted bytes b got from get(size) (own as
// get said) when they go to the outbox, then being the Done of the write
// (nil: none); it returns the done to write them with: then itself if the
// connection's buffer is not in them. A new buffer becomes the
// connection's if the connection has none free as large and it is at most
// maxHeaderBuffer; a lent one that the formatting outgrew is free again.
func (h *headerBuffer) lend(b []byte, own bool, then func(error)) func(error) {
	if own {
		if cap(b) == cap(h.buf) && len(b) > 0 && &b[0] == &h.buf[:1][0] {
			h.then = then
			return h.done
		}
		h.busy.Store(false) // outgrown: b is a new array
	}
	if h.busy.Load() || cap(b) <= cap(h.buf) || cap(b) > maxHeaderBuffer || len(b) == 0 {
		return then
	}
	h.buf = b
	h.then = then
	h.busy.Store(true)
	return h.done
}

// replyBuffer returns an empty buffer with room for size bytes to format
// a reply into: the connection's header buffer if lendable and free
// (*own is then set), else a new one.
func (c *Connection) replyBuffer(lendable bool, size int, own *bool) []byte {
	if !lendable {
		return make([]byte, 0, size)
	}
	b, o := c.header.get(size)
	*own = o
	return b
}

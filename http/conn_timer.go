package http

import (
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// This file is a Connection's timer: its visits on the socket's
// maintenance goroutine (aio.TimerExpired), which enforce the request,
// response and idle timeouts, and the server's drain. The write timeout
// is not here: it is the outbox's (aio's WriteTimeout), the one for all
// of the connection's output.

// checkTimeouts is the timer's visit.
func (c *Connection) checkTimeouts(now int64) {
	cfg := &c.srv.cfg
	c.mu.Lock()
	if c.closed || c.sock.Closing() {
		// Closing (its last output draining, or aborted): the outbox's
		// close deadline and write timeout take it from here.
		c.mu.Unlock()
		return
	}
	// Output written and not yet in the kernel: the outbox is the one
	// queue, so this is all the connection has to send.
	unsent := c.sock.Len() > 0
	stats := &c.srv.stats
	busy := unsent
	if busy {
		c.busyAt = now
	}
	if c.stream != nil && busy {
		c.streamAt = now // the client is still taking the pieces: not a stall
	}
	switch {
	case cfg.ResponseTimeout > 0 && c.stream != nil && !unsent &&
		now-c.streamAt > int64(cfg.ResponseTimeout):
		// The application stopped feeding a streamed body: the response
		// cannot be completed, nor another one sent after it. Counted
		// before the abort: the client may see the close at once.
		stats.responseTimeouts.Add(1)
		_ = c.sock.Abort() // SinkClosed follows; visits until then return early
		c.mu.Unlock()
		c.srv.log.Warn("http: streamed body stalled; closing", "conn", c.String(), "timeout", cfg.ResponseTimeout)
		return
	case cfg.ResponseTimeout > 0 && !c.closing && c.stream == nil && c.delivered > c.nextOut && !busy &&
		now-max(c.waitq.At(0).at, c.busyAt) > int64(cfg.ResponseTimeout):
		// Unanswered for ResponseTimeout while the connection had nothing
		// to write: an application may hold an answer until the client
		// has taken the ones before it (Haboob's streamed files do).
		stats.responseTimeouts.Add(1)
		head := c.waitq.At(0).req
		resp := ServiceUnavailable(cfg.RetryAfter)
		resp.Close = true
		c.srv.log.Warn("http: request not answered in time", "conn", c.String(), "timeout", cfg.ResponseTimeout)
		c.emitLocked(Reply{Req: head, Resp: resp})
	case cfg.RequestTimeout > 0 && !c.readDone && c.reqStart != 0 && len(c.held) == 0 && c.ready.Len() == 0 && now-c.reqStart > int64(cfg.RequestTimeout):
		stats.requestTimeouts.Add(1)
		c.stopReadingLocked()
		c.linger = true
		resp := StatusResponse(StatusRequestTimeout)
		resp.Close = true
		c.answerSelfLocked(resp, now)
	case !unsent && c.idleLocked() && (c.srv.draining.Load() || c.idleTimeout() > 0 && now-c.lastAct > int64(c.idleTimeout())):
		stats.idleClosed.Add(1)
		c.stopReadingLocked()
		c.closing = true
		_ = c.sock.Close()
	}
	c.unlock()
}

// onTimer is the connection's periodic visit (aio.TimerExpired): check
// the timeouts and set the next visit, on the server's tick, so that all
// connections share the socket's maintenance wake-ups.
func (c *Connection) onTimer() {
	c.checkTimeouts(sink.Nanotime())
	c.armTimer()
}

func (c *Connection) armTimer() {
	iv := int64(c.srv.cfg.TimerInterval)
	now := sink.Nanotime()
	c.sock.SetTimer(time.Duration(iv - now%iv))
}

// idleTimeout is how long the connection may stay idle: a connection beyond
// MaxConnections gets no longer than a request may take to arrive.
func (c *Connection) idleTimeout() time.Duration {
	cfg := &c.srv.cfg
	if c.overLimit && cfg.RequestTimeout > 0 && (cfg.IdleTimeout <= 0 || cfg.RequestTimeout < cfg.IdleTimeout) {
		return cfg.RequestTimeout
	}
	return cfg.IdleTimeout
}

// idleLocked reports a connection with nothing to do: no request arriving,
// waiting for an answer or being written.
func (c *Connection) idleLocked() bool {
	return c.reqStart == 0 && len(c.held) == 0 && !c.owesLocked()
}

// owesLocked reports whether the connection has a response to send or
// being sent: a request received and not answered, or a streamed body not
// complete. (Output written into the outbox is sent before any close:
// the outbox closes only once it has drained.)
func (c *Connection) owesLocked() bool {
	return c.nextIn != c.nextOut || c.stream != nil
}

// drain winds the connection down for a server shutdown: it reads no
// more, dropping a request partly received (no response is owed for it),
// and closes the connection at once if it owes no response; otherwise the
// responses it owes go out, the last one closing it (Server.Draining
// makes every response close).
func (c *Connection) drain() {
	c.mu.Lock()
	if c.closed || c.sock.Closing() {
		if !c.closed && c.linger {
			_ = c.sock.Close() // a shutdown does not wait for lingering closes
		}
		c.mu.Unlock()
		return
	}
	c.stopReadingLocked()
	c.reqStart = 0
	c.wantCont = false
	if c.owesLocked() {
		c.mu.Unlock()
		return
	}
	c.closing = true
	_ = c.sock.Close()
	c.mu.Unlock()
}

package http

import (
	"fmt"

	"golang.org/x/net/http2"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/sink"
)

// This file is an HTTP/2 connection's timer visits (the socket's
// maintenance goroutine), its drain and its close.

// onTimerAny is the connection's periodic visit for either protocol.
func (c *Connection) onTimerAny() {
	h := c.h2.Load()
	if h == nil {
		c.onTimer()
		return
	}
	h.checkTimeouts(sink.Nanotime())
	c.armTimer()
}

// onClosedAny handles the socket's close for either protocol.
func (c *Connection) onClosedAny(ev aio.SinkClosed) {
	if h := c.h2.Load(); h != nil {
		h.onClosed(ev)
		return
	}
	c.onClosed(ev)
}

// checkTimeouts enforces, per connection, the request timeout on a
// frame or header block received in part; per stream, the request timeout (408 on the
// stream), the response timeout (503 on the stream) and a streamed body's stall (the stream is reset); per
// connection, the write timeout for DATA the client's windows hold back
// (the outbox has its own for bytes written) and the idle timeout.
func (h *h2Conn) checkTimeouts(now int64) {
	c := h.c
	cfg := &c.srv.cfg
	stats := &c.srv.stats
	c.mu.Lock()
	if h.closed || h.failed || c.sock.Closing() {
		c.mu.Unlock()
		return
	}
	if cfg.RequestTimeout > 0 && h.partialAt != 0 && now-h.partialAt > int64(cfg.RequestTimeout) {
		// A frame or a header block trickling in (slowloris).
		h.connErrorLocked(http2.ErrCodeNo, &stats.requestTimeouts, "frame or header block not received in time")
		c.unlock()
		return
	}
	blocked := false
	for _, st := range h.streams {
		if st.body != nil && st.body.pending() && (st.window <= 0 || h.sendWindow <= 0) {
			blocked = true
		}
		if !st.delivered && !st.reset && cfg.RequestTimeout > 0 && now-st.at > int64(cfg.RequestTimeout) {
			// The request's body did not arrive in time (slowloris).
			stats.requestTimeouts.Add(1)
			h.answerSelfLocked(st, StatusResponse(StatusRequestTimeout))
			continue
		}
		if cfg.ResponseTimeout <= 0 || now-st.at <= int64(cfg.ResponseTimeout) {
			continue
		}
		switch {
		case st.delivered && !st.replied:
			stats.responseTimeouts.Add(1)
			if st.reset {
				st.replied = true
				h.closeStreamLocked(st)
				continue
			}
			c.srv.log.Warn("http: h2 request not answered in time", "conn", c.String(), "stream", st.id)
			h.emitLocked(st, Reply{Req: st.req, Resp: ServiceUnavailable(cfg.RetryAfter)})
		case st.stream != nil && !st.body.pending():
			stats.responseTimeouts.Add(1)
			c.srv.log.Warn("http: h2 streamed body stalled", "conn", c.String(), "stream", st.id)
			h.resetLocked(st.id, http2.ErrCodeInternal)
		}
	}
	switch {
	case !blocked:
		h.progressAt = now
	case cfg.WriteTimeout > 0 && now-h.progressAt > int64(cfg.WriteTimeout):
		stats.h2.writeStalls.Add(1)
		c.srv.log.Warn("http: h2 client does not open its windows; closing", "conn", c.String())
		h.failStreamsLocked(fmt.Errorf("http: h2 write stalled: %w", &sink.ClosedError{Sink: c.String()}))
		_ = c.sock.Abort()
		c.unlock()
		return
	}
	if len(h.streams) == 0 && (c.srv.draining.Load() || c.idleTimeout() > 0 && now-h.lastAct > int64(c.idleTimeout())) {
		stats.idleClosed.Add(1)
		h.goAwayLocked()
	}
	h.flushLocked()
	c.unlock()
}

// drain is Connection.drain for HTTP/2: GOAWAY, the open streams served,
// then the close.
func (h *h2Conn) drain() {
	c := h.c
	c.mu.Lock()
	if h.closed || c.sock.Closing() {
		if !h.closed && c.linger {
			_ = c.sock.Close() // a shutdown does not wait for lingering closes
		}
		c.mu.Unlock()
		return
	}
	h.goAwayLocked()
	h.flushLocked()
	c.unlock()
}

// onClosed handles the socket's close: every response not written is
// dropped.
func (h *h2Conn) onClosed(ev aio.SinkClosed) {
	c := h.c
	c.mu.Lock()
	if h.closed {
		c.mu.Unlock()
		return
	}
	if ev.Reason == aio.ClosedWriteTimeout {
		c.srv.stats.writeTimeouts.Add(1)
	}
	err := c.closedErr()
	if ev.Err != nil {
		err = fmt.Errorf("%w (%s: %w)", err, ev.Reason, ev.Err)
	}
	h.failStreamsLocked(err)
	for _, d := range h.outDones {
		c.calls = append(c.calls, doneCall{d, err})
	}
	h.outDones, h.out = nil, nil
	h.closed = true
	c.closed = true
	c.releaseBodiesLocked()
	c.unlock()
	c.life.close(err)
	c.srv.remove(c)
}

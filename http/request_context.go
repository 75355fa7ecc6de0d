package http

import (
	"context"
	"errors"
	"sync"

	"github.com/sandstorm-go/sandstorm/aio"
)

// requestContext is Request's context field's type, named here so that
// everything about the context lives in this file.
type requestContext = context.Context

// Context returns the request's context. Unless SetContext gave it
// another, it is its connection's: cancelled when the connection closes
// (the client went away, a timeout or the server closed it), with
// context.Cause naming why, so that a handler doing long work for the
// request can stop. An HTTP/2 request's is its stream's, derived from the
// connection's: also cancelled when the stream is reset (by the client,
// or by the server for an error: the cause wraps ErrStreamReset) and once
// its response is all written (ErrStreamDone), as net/http's is when
// ServeHTTP returns. It is made on the first call, which should be the
// goroutine holding the request's. A context SetContext gives that derives from this one
// (a trace span's, as otelstage sets) is cancelled with it. A Request no
// server parsed has context.Background().
//
// With Context a Request is a stage.ContextEvent, and with SetContext a
// stage.ContextSetter, so otelstage traces Haboob's requests: each
// stage's span is the parent of the next one's and of the spans a
// handler starts from req.Context().
func (r *Request) Context() context.Context {
	if r.ctx != nil {
		return r.ctx
	}
	if c, ok := r.Conn.(*Connection); ok {
		if h := c.h2.Load(); h != nil && r.Major == 2 {
			if ctx := h.streamContext(r); ctx != nil {
				r.ctx = ctx // the same context on every call
				return ctx
			}
		}
		return c.life.context()
	}
	return context.Background()
}

// HTTP/2 stream context causes (context.Cause of an h2 request's
// Context).
var (
	// ErrStreamReset: the stream was reset, by the client (RST_STREAM)
	// or by the server (an error, an aborted Stream). When the whole
	// connection fails or closes first, the cause is the connection's
	// error instead.
	ErrStreamReset = errStreamReset
	// ErrStreamDone: the stream's response is written.
	ErrStreamDone = errors.New("http: h2 stream done")
)

// streamContext returns the context of r's stream, made now if it is the
// first asked for; nil if the stream is no longer open (its response is
// written: the connection's context serves).
func (h *h2Conn) streamContext(r *Request) context.Context {
	parent := h.c.life.context()
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	st := h.streams[uint32(r.Seq)]
	if st == nil || st.req != r {
		return nil
	}
	if st.ctx == nil {
		st.ctx, st.cancel = context.WithCancelCause(parent)
		if st.dropped != nil {
			st.cancel(st.dropped)
		}
	}
	return st.ctx
}

// endContextLocked cancels st's context, if one was made, with cause
// (after the connection's lock is released).
func (h *h2Conn) endContextLocked(st *h2Stream, cause error) {
	if st.dropped == nil {
		st.dropped = cause
	}
	if st.cancel != nil {
		h.c.calls = append(h.c.calls, doneCall{st.cancel, cause})
		st.cancel = nil
	}
}

// Expired is called by the stage runtime when it drops the request
// unhandled because its context ended while it waited in a queue
// (stage.ExpiredEvent). The request is answered 503 on its connection so
// that nothing waits for an answer that will not come: a reset HTTP/2
// stream frees its slot against MaxConcurrentStreams at once (the answer
// itself is not sent, and counted as dropped), and an HTTP/1.1 request
// whose context a handler or middleware gave a deadline keeps its
// connection's pipeline moving. On a closed connection it does nothing
// more than count the answer as dropped.
func (r *Request) Expired(stage string) {
	if c, ok := r.Conn.(*Connection); ok {
		_ = c.reply(Reply{Req: r, Resp: ServiceUnavailable(c.srv.cfg.RetryAfter)})
	}
}

// TraceHeader returns the request's header field key, for otelstage's
// trace propagation (otelstage.HeaderCarrier): a `traceparent` from the
// client continues its trace.
func (r *Request) TraceHeader(key string) string { return r.Header.Get(key) }

// connContext is a Connection's context, made on the first request that
// asks for it (most never do) and cancelled when the connection closes.
type connContext struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelCauseFunc
	closed bool
	cause  error // once closed: the cause, or nil until built from by and ev
	by     *Connection
	ev     aio.SinkClosed
}

func (cc *connContext) context() context.Context {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.ctx == nil {
		cc.ctx, cc.cancel = context.WithCancelCause(context.Background())
		if cc.closed {
			cc.cancel(cc.causeLocked())
		}
	}
	return cc.ctx
}

// causeLocked is the close's cause, built now if it was left to build.
func (cc *connContext) causeLocked() error {
	if cc.cause == nil {
		cc.cause = cc.by.closeError(cc.ev)
	}
	return cc.cause
}

// close cancels the context with cause (the connection closed).
func (cc *connContext) close(cause error) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.closed {
		return
	}
	cc.closed, cc.cause = true, cause
	if cc.cancel != nil {
		cc.cancel(cause)
	}
}

// closeFrom is close for c closed by ev, with cause the error built for
// it, or nil: then the error is built only if a context was made or is
// asked for later.
func (cc *connContext) closeFrom(c *Connection, ev aio.SinkClosed, cause error) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.closed {
		return
	}
	cc.closed, cc.cause, cc.by, cc.ev = true, cause, c, ev
	if cc.cancel != nil {
		cc.cancel(cc.causeLocked())
	}
}

// SetContext replaces the request's context (nil: context.Background()).
// It changes r in place, unlike net/http's WithContext, which returns a
// copy: a Request is known by its identity (its Conn and Seq order the
// responses on the connection, its Reply points to it). Call it only
// while holding the request: before enqueuing it on a stage, or in the
// handler that has it.
func (r *Request) SetContext(ctx context.Context) { r.ctx = ctx }

// Context returns the context of the request the reply answers
// (Request.Context), context.Background() without one, so that a stage
// handling replies (Haboob's HttpSend) continues the request's trace.
func (r *Reply) Context() context.Context {
	if r.Req == nil {
		return context.Background()
	}
	return r.Req.Context()
}

// SetContext sets the context of the request the reply answers
// (Request.SetContext); without a request it does nothing.
func (r *Reply) SetContext(ctx context.Context) {
	if r.Req != nil {
		r.Req.SetContext(ctx)
	}
}

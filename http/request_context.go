package http

import (
	"context"
	"sync"
)

// requestContext is Request's context field's type, named here so that
// everything about the context lives in this file.
type requestContext = context.Context

// Context returns the request's context. Unless SetContext gave it
// another, it is its connection's: cancelled when the connection closes
// (the client went away, a timeout or the server closed it), with
// context.Cause naming why, so that a handler doing long work for the
// request can stop. A context SetContext gives that derives from this one
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
		return c.life.context()
	}
	return context.Background()
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
	cause  error // set once closed
}

func (cc *connContext) context() context.Context {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.ctx == nil {
		cc.ctx, cc.cancel = context.WithCancelCause(context.Background())
		if cc.cause != nil {
			cc.cancel(cc.cause)
		}
	}
	return cc.ctx
}

// close cancels the context with cause (the connection closed).
func (cc *connContext) close(cause error) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.cause != nil {
		return
	}
	cc.cause = cause
	if cc.cancel != nil {
		cc.cancel(cause)
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

package http

import "context"

// requestContext is Request's context field's type, named here so that
// everything about the context lives in this file.
type requestContext = context.Context

// Context returns the request's context: context.Background() unless
// SetContext gave it another. The server does not end it when the
// connection closes: it carries values (a trace span), not cancellation.
//
// With Context a Request is a stage.ContextEvent, and with SetContext a
// stage.ContextSetter, so otelstage traces Haboob's requests: each
// stage's span is the parent of the next one's and of the spans a
// handler starts from req.Context().
func (r *Request) Context() context.Context {
	if r.ctx != nil {
		return r.ctx
	}
	return context.Background()
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

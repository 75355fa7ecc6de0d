package stage

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/sandstorm-go/sandstorm/sink"
)

// ErrCallFailed is wrapped by the error Call returns when the request was
// admitted but a stage failed it: a handler answered with Request.Fail, or
// the runtime contained a handler's error or panic on the batch that held
// the request (a CallError then names the stage).
var ErrCallFailed = errors.New("stage: call failed")

// ErrCallAbandoned is wrapped by the error Call returns when the manager
// stopped, or the request was dropped, before any stage replied.
var ErrCallAbandoned = errors.New("stage: call abandoned")

// CallError is a failed call: Stage is the stage whose handler failed
// (empty when a handler answered with Request.Fail), Err the cause. It
// wraps both ErrCallFailed and Err.
type CallError struct {
	Stage string
	Err   error
}

func (e *CallError) Error() string {
	if e.Stage == "" {
		return fmt.Sprintf("stage: call failed: %v", e.Err)
	}
	return fmt.Sprintf("stage: call failed in stage %q: %v", e.Stage, e.Err)
}

// Unwrap returns ErrCallFailed and the cause.
func (e *CallError) Unwrap() []error { return []error{ErrCallFailed, e.Err} }

// Request is an event that waits for a reply: Call enqueues one and blocks
// until a handler answers it with Reply or Fail, the caller's context ends,
// or the manager stops. The request may pass through any number of stages
// (each forwards the same *Request) before one of them answers.
//
// Only the first answer counts; later ones report false. A handler that
// neither answers nor forwards a request leaves its caller waiting until
// its context ends, so give callers a deadline.
//
// A Request carries its caller's context (Context): the runtime drops a
// request whose context has ended before its stage handles it, counted in
// Stats.Expired, so a stage under overload spends no work on callers that
// have given up.
type Request[Req, Resp any] struct {
	// Value is the caller's request.
	Value Req

	ctx      context.Context                 // the caller's: Wait watches it
	cur      atomic.Pointer[context.Context] // SetContext's, if any
	answered atomic.Bool
	reply    chan callResult[Resp] // capacity 1: answering never blocks
}

type callResult[Resp any] struct {
	v   Resp
	err error
}

// NewRequest returns a request carrying v and ctx, for callers that enqueue
// it themselves (for example with EnqueueMany) and wait with Wait. Most
// callers use Call.
func NewRequest[Req, Resp any](ctx context.Context, v Req) *Request[Req, Resp] {
	return &Request[Req, Resp]{Value: v, ctx: ctx, reply: make(chan callResult[Resp], 1)}
}

// Context returns the request's context: the caller's (its deadline,
// cancellation and values, a trace span for instance), or the one the
// last SetContext set, which derives from it.
func (r *Request[Req, Resp]) Context() context.Context {
	if c := r.cur.Load(); c != nil {
		return *c
	}
	return r.ctx
}

// SetContext implements ContextSetter: ctx, derived from Context(),
// becomes the request's context for the stages it visits next. The
// caller's Wait still watches the caller's own context.
func (r *Request[Req, Resp]) SetContext(ctx context.Context) { r.cur.Store(&ctx) }

// Reply answers the request with v. It reports whether this was the first
// answer.
func (r *Request[Req, Resp]) Reply(v Resp) bool { return r.answer(callResult[Resp]{v: v}) }

// Fail answers the request with an error: the caller gets a CallError
// wrapping err and ErrCallFailed.
func (r *Request[Req, Resp]) Fail(err error) bool {
	if err == nil {
		err = errors.New("nil error")
	}
	return r.answer(callResult[Resp]{err: &CallError{Err: err}})
}

// Answered reports whether the request has been answered.
func (r *Request[Req, Resp]) Answered() bool { return r.answered.Load() }

func (r *Request[Req, Resp]) answer(res callResult[Resp]) bool {
	if !r.answered.CompareAndSwap(false, true) {
		return false
	}
	r.reply <- res
	return true
}

// failCall is the runtime's answer when a stage failed the request.
func (r *Request[Req, Resp]) failCall(stage string, err error) {
	r.answer(callResult[Resp]{err: &CallError{Stage: stage, Err: err}})
}

// expire is the runtime's answer when it dropped the request because its
// context had ended.
func (r *Request[Req, Resp]) expire(stage string) {
	r.answer(callResult[Resp]{err: fmt.Errorf("%w: dropped by stage %q: %w", ErrCallAbandoned, stage, r.ctx.Err())})
}

// Wait waits for the answer, for r's context to end (the error wraps
// context.DeadlineExceeded or context.Canceled), or for done to be closed
// (nil: never; the error wraps ErrCallAbandoned).
func (r *Request[Req, Resp]) Wait(done <-chan struct{}) (Resp, error) {
	select {
	case res := <-r.reply:
		return res.v, res.err
	case <-r.ctx.Done():
		var zero Resp
		return zero, fmt.Errorf("stage: call: %w", r.ctx.Err())
	case <-done:
		var zero Resp
		return zero, fmt.Errorf("%w: manager stopped", ErrCallAbandoned)
	}
}

// Call enqueues a Request carrying v on s and waits for a stage to answer
// it, for ctx to end or for the manager to stop. The error tells the cases
// apart:
//
//   - errors.Is(err, sink.ErrRejected): the stage refused the request (its
//     queue is full or its predicate sheds load); nothing was done. A
//     closed stage gives sink.ErrClosed.
//   - errors.Is(err, ErrCallFailed): a stage failed it (errors.As a
//     *CallError for which stage and why).
//   - errors.Is(err, context.DeadlineExceeded) or context.Canceled: ctx
//     ended first; a stage may still be working on the request, but the
//     runtime drops it unhandled if no stage has taken it up yet.
//   - errors.Is(err, ErrCallAbandoned): the manager stopped first.
//
// Give ctx a deadline: a request that no stage answers waits for it.
func Call[Req, Resp any](ctx context.Context, s sink.Sink, v Req) (Resp, error) {
	r := NewRequest[Req, Resp](ctx, v)
	if err := ctx.Err(); err != nil {
		var zero Resp
		return zero, fmt.Errorf("stage: call: %w", err)
	}
	if err := s.Enqueue(r); err != nil {
		var zero Resp
		return zero, err
	}
	var done <-chan struct{}
	if k, ok := s.(*stageSink); ok {
		done = k.st.mgr.Done()
	}
	return r.Wait(done)
}

// call is what the runtime sees of a Request, whatever its types.
type call interface {
	failCall(stage string, err error)
	expire(stage string)
}

// failCalls answers the requests among a failure's events: the stage
// failed them. Called from Stage.fail.
func failCalls(f Failure) {
	for _, e := range f.Events {
		if c, ok := e.(call); ok {
			c.failCall(f.Stage, f.Err)
		}
	}
}

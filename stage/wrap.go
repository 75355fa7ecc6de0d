package stage

import (
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// Wrap returns a Handler that is h with its HandleEvents replaced by
// handle, for middleware around handlers (tracing, measuring): it forwards
// h's optional interfaces (Initializer, Destroyer, SingleThreaded), running
// init, if not nil, before h's Init. handle typically calls
// h.HandleEvents.
func Wrap(h Handler, init func(c *Context) error, handle func(batch []sink.Event) error) Handler {
	w := &wrapped{h: h, init: init, handle: handle}
	if _, ok := h.(SingleThreaded); ok {
		return &wrappedSingle{w}
	}
	return w
}

type wrapped struct {
	h      Handler
	init   func(c *Context) error
	handle func(batch []sink.Event) error
}

type wrappedSingle struct{ *wrapped }

func (*wrappedSingle) SingleThreaded() {}

func (w *wrapped) HandleEvents(batch []sink.Event) error { return w.handle(batch) }

// Init runs the middleware's init, then h's Init if it has one.
func (w *wrapped) Init(c *Context) error {
	if w.init != nil {
		if err := w.init(c); err != nil {
			return err
		}
	}
	if in, ok := w.h.(Initializer); ok {
		return in.Init(c)
	}
	return nil
}

// Destroy runs h's Destroy if it has one.
func (w *wrapped) Destroy() error {
	if d, ok := w.h.(Destroyer); ok {
		return d.Destroy()
	}
	return nil
}

// Unwrap returns the wrapped handler.
func (w *wrapped) Unwrap() Handler { return w.h }

// WrapWaits is Wrap for middleware that wants to know how long each event
// waited in the stage's queue (tracing records it): the runtime calls
// handle with the batch and, for each event, the time from its enqueue to
// the start of the batch, or -1 when unknown (an event queued before the
// stage was created). The stage's queue then reads the clock for every
// event it takes, about 30 ns each, instead of for a sample.
func WrapWaits(h Handler, init func(c *Context) error, handle func(batch []sink.Event, waits []time.Duration) error) Handler {
	w := &wrappedWaits{wrapped{h: h, init: init}, handle}
	w.wrapped.handle = func(batch []sink.Event) error {
		waits := make([]time.Duration, len(batch))
		for i := range waits {
			waits[i] = -1
		}
		return handle(batch, waits)
	}
	if _, ok := h.(SingleThreaded); ok {
		return &wrappedWaitsSingle{w}
	}
	return w
}

// waitsHandler is a handler made by WrapWaits, which the runtime tells
// its events' queue waits.
type waitsHandler interface {
	handleWithWaits(batch []sink.Event, waits []time.Duration) error
}

type wrappedWaits struct {
	wrapped
	withWaits func(batch []sink.Event, waits []time.Duration) error
}

func (w *wrappedWaits) handleWithWaits(batch []sink.Event, waits []time.Duration) error {
	return w.withWaits(batch, waits)
}

type wrappedWaitsSingle struct{ *wrappedWaits }

func (*wrappedWaitsSingle) SingleThreaded() {}

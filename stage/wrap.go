package stage

import "github.com/sandstorm-go/sandstorm/sink"

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

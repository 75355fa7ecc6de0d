package stage

import (
	"context"
	"errors"
	"log/slog"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/sandstorm-go/sandstorm/sink"
)

// ErrNoStage is returned when a stage name is not known to the manager.
var ErrNoStage = errors.New("stage: no such stage")

// Context is what a handler's Init gets: its manager, its own stage, its
// arguments, a logger and the metrics registry.
type Context struct {
	mgr   *Manager
	stage *Stage
	args  Decoder // nil: none
	path  string  // key path of args, for errors
	file  string
	log   *slog.Logger
}

// Manager returns the stage's manager.
func (c *Context) Manager() *Manager { return c.mgr }

// Stage returns the stage being initialized.
func (c *Context) Stage() *Stage { return c.stage }

// Logger returns a logger tagged with the stage's name.
func (c *Context) Logger() *slog.Logger { return c.log }

// Metrics returns the manager's metrics registry.
func (c *Context) Metrics() metrics.Registry { return c.mgr.metrics }

// Context returns a context that ends when the manager stops.
func (c *Context) Context() context.Context {
	if ctx := c.mgr.runContext(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// Profile registers a value the profiler samples under
// "<stage>.<name>" (Sandstorm's ProfilableIF).
func (c *Context) Profile(name string, f func() float64) {
	c.stage.metrics.Register(name, f)
}

// HasArgs reports whether the stage was given args.
func (c *Context) HasArgs() bool { return present(c.args) }

// DecodeArgs decodes the stage's args strictly into v (a pointer to the
// handler's own struct, pre-filled with its defaults): an unknown key, a
// wrong type or a bad duration is an error naming the file, line and key.
func (c *Context) DecodeArgs(v any) error {
	if !c.HasArgs() {
		return nil
	}
	return c.args.Decode(v)
}

// Sink returns the sink of the named stage for this stage to enqueue on.
// Enqueues through it are traced as edges of the stage graph.
//
// A name that is no stage is an error wrapping ErrNoStage; when the
// stage's args hold the name, the error gives their file, line and key.
func (c *Context) Sink(name string) (sink.Sink, error) {
	s, err := c.mgr.sinkFrom(c.stage.name, name)
	if err != nil {
		return nil, c.sinkError(name, err)
	}
	return s, nil
}

// Traced returns s as a sink this stage enqueues on. A stage's sink handed
// to another stage in an event (where to send the reply, say) would trace
// its enqueues as coming from the stage that asked for it; through Traced
// they are traced from the stage that really sends. Sinks that are not a
// stage's of this manager, and stages since destroyed, come back as they
// are.
func (c *Context) Traced(s sink.Sink) sink.Sink {
	k, ok := s.(*stageSink)
	if !ok || k.outside || k.from == c.stage.name || k.st.mgr != c.mgr {
		return s
	}
	t, err := c.mgr.sinkFrom(c.stage.name, k.st.name)
	if err != nil || t.(*stageSink).st != k.st {
		return s
	}
	return t
}

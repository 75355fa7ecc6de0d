package stage

import (
	"fmt"
	"sort"
	"sync"

	"github.com/sandstorm-go/sandstorm/sink"
)

// Handler is a stage's application logic. The runtime calls HandleEvents
// with batches taken off the stage's queue; a handler never dequeues. A
// returned error or a panic is a failure of that batch: it is recovered,
// counted, logged and reported, and the stage goes on.
//
// The batch slice is reused after HandleEvents returns: copy what you keep.
// Unless the handler implements SingleThreaded, HandleEvents may run on
// several goroutines at once.
type Handler interface {
	HandleEvents(batch []sink.Event) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(batch []sink.Event) error

// HandleEvents calls f(batch).
func (f HandlerFunc) HandleEvents(batch []sink.Event) error { return f(batch) }

// Initializer is implemented by handlers that set up before the first
// batch: decode their args, look up other stages' sinks, register metrics.
// An error fails the stage's creation.
type Initializer interface {
	Init(c *Context) error
}

// Destroyer is implemented by handlers that release resources when their
// stage is destroyed or the manager shuts down, after the last batch.
type Destroyer interface {
	Destroy() error
}

// SingleThreaded is implemented by handlers that are not reentrant: the
// runtime runs at most one HandleEvents of such a handler at a time.
type SingleThreaded interface {
	SingleThreaded()
}

// Factory makes a fresh handler for a stage.
type Factory func() Handler

// Registry maps handler names used in configuration files to factories.
type Registry struct {
	mu        sync.RWMutex
	factories map[string]Factory
	stageArgs map[string][]string // handler name -> args key paths naming stages (references.go)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{factories: map[string]Factory{}} }

// DefaultRegistry is where packages register handlers from init functions.
// Load and Parse use it when given a nil registry.
var DefaultRegistry = NewRegistry()

// Register adds a factory under name. It panics on an empty name, a nil
// factory or a duplicate name: these are programming errors.
func (r *Registry) Register(name string, f Factory) {
	if name == "" {
		panic("stage: Register with empty name")
	}
	if f == nil {
		panic(fmt.Sprintf("stage: Register(%q) with nil factory", name))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.factories[name]; dup {
		panic(fmt.Sprintf("stage: handler %q registered twice", name))
	}
	r.factories[name] = f
}

// Lookup returns the factory registered under name.
func (r *Registry) Lookup(name string) (Factory, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	f, ok := r.factories[name]
	return f, ok
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.factories))
	for n := range r.factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

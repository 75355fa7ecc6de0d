package stage

import (
	"fmt"
	"reflect"
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
	stageArgs map[string][]string   // handler name -> args key paths naming stages (references.go)
	args      map[string]func() any // handler name -> its args value (DeclareArgs)
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

// DeclareArgs declares the type of a handler's args: newArgs returns a
// pointer to a fresh args value, holding the handler's defaults. Load
// decodes each stage's args block into one, strictly, so that an unknown
// key or a wrong type in args is reported with the rest of the file's
// errors, before any stage is created, not at Start by the handler's Init
// (which still decodes its args with Context.DecodeArgs):
//
//	reg.Register("shop.Front", newFront)
//	reg.DeclareArgs("shop.Front", func() any { return &frontArgs{Timeout: time.Second} })
//
// A handler need not be declared when it keeps its args in an exported
// field named Args of struct type: Load decodes into a copy of the field
// of a handler the factory makes (without calling Init).
func (r *Registry) DeclareArgs(handler string, newArgs func() any) {
	if newArgs == nil {
		panic(fmt.Sprintf("stage: DeclareArgs(%q) with nil function", handler))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.args == nil {
		r.args = map[string]func() any{}
	}
	r.args[handler] = newArgs
}

// newArgs returns a fresh args value of handler, made by f, to check a
// stage's args against; nil if the handler declares none.
func (r *Registry) newArgs(handler string, f Factory) any {
	r.mu.RLock()
	newArgs := r.args[handler]
	r.mu.RUnlock()
	if newArgs != nil {
		return newArgs()
	}
	return argsField(f())
}

// argsField returns a pointer to a copy of h's exported struct field Args
// (through a pointer to struct), or nil.
func argsField(h Handler) any {
	v := reflect.ValueOf(h)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	sf, ok := v.Elem().Type().FieldByName("Args")
	if !ok || !sf.IsExported() || len(sf.Index) != 1 {
		return nil
	}
	f := v.Elem().Field(sf.Index[0])
	t := f.Type()
	if t.Kind() == reflect.Pointer {
		if t.Elem().Kind() != reflect.Struct {
			return nil
		}
		c := reflect.New(t.Elem())
		if !f.IsNil() {
			c.Elem().Set(f.Elem())
		}
		return c.Interface()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	c := reflect.New(t)
	c.Elem().Set(f)
	return c.Interface()
}

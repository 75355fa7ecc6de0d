package remote

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sandstorm-go/sandstorm/sink"
)

// ErrNoCodec is wrapped by the error an Enqueue on a remote sink returns
// for an event whose type has no registered codec.
var ErrNoCodec = errors.New("remote: no codec for event type")

// Codec turns one Go type into bytes and back. Encode and Decode get the
// Wire of the node doing it, so that sinks inside events can travel as
// references (Wire.ExportSink, Wire.ImportSink).
type Codec struct {
	Name   string // the type's name on the wire, the same on every node
	Type   reflect.Type
	Encode func(w *Wire, v any) ([]byte, error)
	Decode func(w *Wire, data []byte) (any, error)
	// Home, if set, names the process (Node.Instance) an event of this
	// type belongs to: a remote sink sends it to the replica of its stage
	// on that instance when it serves the stage ("" or an instance that
	// does not: any replica, as usual). See SetHome.
	Home func(v any) string

	// decodeRun, if set, decodes several events of this type at once
	// (one JSON array): ok false leaves them to Decode one by one, which
	// also says what is wrong with a bad one.
	decodeRun func(items [][]byte, es []sink.Event) (_ []sink.Event, ok bool)
	// appendTo, if set, appends an event's encoding to b instead of
	// Encode's allocating it (encoding.BinaryAppender).
	appendTo func(b []byte, v any) ([]byte, error)
}

// Codecs is a registry of event codecs keyed by Go type (to encode) and by
// wire name (to decode). Every node of a cluster must register the same
// names for the types it exchanges. It is safe for concurrent use.
type Codecs struct {
	mu  sync.Mutex // held by writers, which replace the table
	tab atomic.Pointer[codecTable]
}

// codecTable is a Codecs' registrations; it is never changed once
// published (writers publish a copy), so lookups, one per event, take no
// lock.
type codecTable struct {
	byType map[reflect.Type]*Codec
	byName map[string]*Codec
}

// update publishes a copy of the table changed by f, under c.mu.
func (c *Codecs) update(f func(t *codecTable)) {
	old := c.tab.Load()
	t := &codecTable{byType: maps.Clone(old.byType), byName: maps.Clone(old.byName)}
	f(t)
	c.tab.Store(t)
}

// NewCodecs returns a registry holding the codecs of the basic types:
// string, []byte, bool, int, int64, uint64, float64, and sink.Sink's
// references (SinkRef).
func NewCodecs() *Codecs {
	c := &Codecs{}
	c.tab.Store(&codecTable{byType: map[reflect.Type]*Codec{}, byName: map[string]*Codec{}})
	Register[string](c, "string")
	Register[[]byte](c, "bytes")
	Register[bool](c, "bool")
	Register[int](c, "int")
	Register[int64](c, "int64")
	Register[uint64](c, "uint64")
	Register[float64](c, "float64")
	Register[SinkRef](c, "remote.SinkRef")
	return c
}

// DefaultCodecs is where packages register codecs from init functions. A
// Node uses it when Options.Codecs is nil.
var DefaultCodecs = NewCodecs()

// Add registers a codec. It panics on an empty name, a nil type or
// function, or a type or name registered twice: these are programming
// errors, found at start.
func (c *Codecs) Add(cd Codec) {
	if cd.Name == "" || cd.Type == nil || cd.Encode == nil || cd.Decode == nil {
		panic(fmt.Sprintf("remote: incomplete codec %q for %v", cd.Name, cd.Type))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.tab.Load().byType[cd.Type]; dup {
		panic(fmt.Sprintf("remote: codec for type %v registered twice", cd.Type))
	}
	if _, dup := c.tab.Load().byName[cd.Name]; dup {
		panic(fmt.Sprintf("remote: codec name %q registered twice", cd.Name))
	}
	c.update(func(t *codecTable) { t.byType[cd.Type], t.byName[cd.Name] = &cd, &cd })
}

func (c *Codecs) forType(t reflect.Type) *Codec {
	return c.tab.Load().byType[t]
}

func (c *Codecs) forName(name string) *Codec {
	return c.tab.Load().byName[name]
}

// RegisterFunc registers a codec for T made of two functions.
func RegisterFunc[T any](c *Codecs, name string, enc func(w *Wire, v T) ([]byte, error), dec func(w *Wire, data []byte) (T, error)) {
	c.Add(Codec{
		Name: name,
		Type: reflect.TypeFor[T](),
		Encode: func(w *Wire, v any) ([]byte, error) {
			return enc(w, v.(T))
		},
		Decode: func(w *Wire, data []byte) (any, error) {
			return dec(w, data)
		},
	})
}

// SetHome makes remote sinks send the events of type T (whose codec is
// registered in c) to the replica on the instance home returns, when that
// instance serves the stage: a reply goes back to the process that holds
// its request when several processes host the stage it is sent to (two
// front nodes hosting HttpSend). An empty home, or an instance not serving
// the stage, leaves the choice to the load as usual. Call it right after
// the registration, before any node uses c. It panics if T has no codec.
func SetHome[T any](c *Codecs, home func(v T) string) {
	t := reflect.TypeFor[T]()
	c.mu.Lock()
	defer c.mu.Unlock()
	cd := c.tab.Load().byType[t]
	if cd == nil {
		panic(fmt.Sprintf("remote: SetHome: no codec for type %v", t))
	}
	withHome := *cd
	withHome.Home = func(v any) string { return home(v.(T)) }
	c.update(func(tab *codecTable) { tab.byType[t], tab.byName[cd.Name] = &withHome, &withHome })
}

// home returns the instance e belongs to (its codec's Home), or "".
func (w *Wire) home(e sink.Event) string {
	if cd := w.codecs.forType(reflect.TypeOf(e)); cd != nil && cd.Home != nil {
		return cd.Home(e)
	}
	return ""
}

var sinkType = reflect.TypeFor[sink.Sink]()

// Register registers the default codec for T under name:
//
//   - if T implements encoding.BinaryMarshaler and *T (or T, for pointer
//     types the pointed-to value) encoding.BinaryUnmarshaler, those;
//   - otherwise JSON, with one addition: a top-level field of type
//     sink.Sink in a struct T (or *struct) travels as a reference to the
//     sender's sink (SinkRef), so a handler on another node can reply to
//     it. A sink.Sink any deeper, or in a type JSON cannot encode, is a
//     panic here, at registration, not a silent loss later.
func Register[T any](c *Codecs, name string) {
	t := reflect.TypeFor[T]()
	if enc, dec, ok := binaryCodec[T](); ok {
		cd := Codec{Name: name, Type: t, Encode: enc, Decode: dec}
		if t.Kind() != reflect.Pointer {
			cd.decodeRun = decodeBinaryRun[T]
		}
		if t.Implements(reflect.TypeFor[encoding.BinaryAppender]()) {
			cd.appendTo = func(b []byte, v any) ([]byte, error) { return v.(encoding.BinaryAppender).AppendBinary(b) }
		}
		c.Add(cd)
		return
	}
	fields, err := sinkFields(t)
	if err != nil {
		panic(fmt.Sprintf("remote: Register(%q): %v", name, err))
	}
	if len(fields) == 0 {
		c.Add(plainJSONCodec[T](name))
		return
	}
	c.Add(jsonCodec(name, t, fields))
}

// binaryCodec returns the encoding.Binary(Un)Marshaler codec of T, if T
// has one. A non-pointer T is decoded without reflection (one value per
// event, boxed once).
func binaryCodec[T any]() (enc func(*Wire, any) ([]byte, error), dec func(*Wire, []byte) (any, error), ok bool) {
	t := reflect.TypeFor[T]()
	bm := reflect.TypeFor[encoding.BinaryMarshaler]()
	bu := reflect.TypeFor[encoding.BinaryUnmarshaler]()
	if !t.Implements(bm) {
		return nil, nil, false
	}
	ptr := t.Kind() == reflect.Pointer
	switch {
	case ptr && t.Implements(bu):
	case !ptr && reflect.PointerTo(t).Implements(bu):
	default:
		return nil, nil, false
	}
	enc = func(_ *Wire, v any) ([]byte, error) { return v.(encoding.BinaryMarshaler).MarshalBinary() }
	if ptr {
		dec = func(_ *Wire, data []byte) (any, error) {
			p := reflect.New(t.Elem())
			if err := p.Interface().(encoding.BinaryUnmarshaler).UnmarshalBinary(data); err != nil {
				return nil, err
			}
			return p.Interface(), nil
		}
		return enc, dec, true
	}
	dec = func(_ *Wire, data []byte) (any, error) {
		p := new(T)
		if err := any(p).(encoding.BinaryUnmarshaler).UnmarshalBinary(data); err != nil {
			return nil, err
		}
		return *p, nil
	}
	return enc, dec, true
}

// decodeBinaryRun decodes items, each T's binary encoding, into one
// slice of T (one allocation for the run, not one per event besides the
// event itself) appended to es; ok is false if any item is bad.
func decodeBinaryRun[T any](items [][]byte, es []sink.Event) (_ []sink.Event, ok bool) {
	vs := make([]T, len(items))
	for i, d := range items {
		if err := any(&vs[i]).(encoding.BinaryUnmarshaler).UnmarshalBinary(d); err != nil {
			return es, false
		}
	}
	return appendBoxed(es, vs), true
}

// sinkFields returns the indexes of t's top-level sink.Sink fields, and
// an error if a sink.Sink hides deeper.
func sinkFields(t reflect.Type) ([]int, error) {
	st := t
	if st.Kind() == reflect.Pointer {
		st = st.Elem()
	}
	var top []int
	if st.Kind() == reflect.Struct {
		for i := range st.NumField() {
			f := st.Field(i)
			if f.Type == sinkType {
				if !f.IsExported() {
					return nil, fmt.Errorf("unexported sink.Sink field %s.%s", st, f.Name)
				}
				top = append(top, i)
				continue
			}
			if f.IsExported() && hidesSink(f.Type, map[reflect.Type]bool{}) {
				return nil, fmt.Errorf("field %s.%s holds a sink.Sink below the top level; give it a codec of its own (RegisterFunc with Wire.ExportSink)", st, f.Name)
			}
		}
		return top, nil
	}
	if hidesSink(t, map[reflect.Type]bool{}) {
		return nil, fmt.Errorf("type %v holds a sink.Sink; give it a codec of its own (RegisterFunc with Wire.ExportSink)", t)
	}
	return nil, nil
}

func hidesSink(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Interface:
		return t == sinkType || t.Implements(sinkType)
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return hidesSink(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && hidesSink(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

// jsonEnvelope carries a struct whose sink.Sink fields travel apart.
type jsonEnvelope struct {
	V     json.RawMessage `json:"v"`
	Sinks map[int]SinkRef `json:"s,omitempty"`
}

// plainJSONCodec is the JSON codec of a T without sink.Sink fields. It
// encodes straight into the message (appendJSON) and decodes a run of
// events of T with one decoder (decodeJSONRun).
func plainJSONCodec[T any](name string) Codec {
	return Codec{Name: name, Type: reflect.TypeFor[T](),
		Encode:   func(_ *Wire, v any) ([]byte, error) { return json.Marshal(v) },
		appendTo: appendJSON,
		Decode: func(_ *Wire, data []byte) (any, error) {
			p := new(T)
			if err := json.Unmarshal(data, p); err != nil {
				return nil, err
			}
			return *p, nil
		},
		decodeRun: decodeJSONRun[T]}
}

// jsonAppender is a json.Encoder writing onto the end of a byte slice:
// the encoding json.Marshal would return, without its own copy.
type jsonAppender struct {
	b   []byte
	enc *json.Encoder
}

func (a *jsonAppender) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}

var jsonAppenders = sync.Pool{New: func() any {
	a := &jsonAppender{}
	a.enc = json.NewEncoder(a)
	return a
}}

// appendJSON appends v's JSON encoding (as json.Marshal's) to b.
func appendJSON(b []byte, v any) ([]byte, error) {
	a := jsonAppenders.Get().(*jsonAppender)
	a.b = b
	err := a.enc.Encode(v) // writes nothing on an error
	b = a.b
	a.b = nil
	jsonAppenders.Put(a)
	if err != nil {
		return nil, err
	}
	return b[:len(b)-1], nil // Encode ends the value with a newline
}

// decodeJSONRun decodes items, each a JSON value of T, with one decoder
// reading them one after the other (a space between them): one decoder
// and one []T for the run rather than a json.Unmarshal each, and each
// byte scanned twice (to find a value's end, then to decode it), as
// json.Unmarshal does for one value. Each item must hold exactly one
// value, ending where the item ends (the decoder's offset says so): if
// one does not (a value spread over two items, two in one, an empty
// item, trailing whitespace), ok is false and es is as it came.
func decodeJSONRun[T any](items [][]byte, es []sink.Event) (_ []sink.Event, ok bool) {
	dec := json.NewDecoder(&itemsReader{items: items})
	vs := make([]T, len(items))
	var end int64
	for i, d := range items {
		if err := dec.Decode(&vs[i]); err != nil {
			return es, false
		}
		end += int64(len(d))
		if dec.InputOffset() != end {
			return es, false
		}
		end++ // the space after it
	}
	return appendBoxed(es, vs), true
}

// itemsReader reads items one after the other, each followed by a space.
type itemsReader struct {
	items [][]byte
	i     int // the item being read
	off   int // how much of it was read (len: its space is next)
}

func (r *itemsReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && r.i < len(r.items) {
		it := r.items[r.i]
		if r.off == len(it) {
			p[n] = ' '
			n++
			r.i, r.off = r.i+1, 0
			continue
		}
		c := copy(p[n:], it[r.off:])
		n += c
		r.off += c
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// jsonCodec is the JSON codec of a struct t (or *struct) whose top-level
// sink.Sink fields (fields) travel as references.
func jsonCodec(name string, t reflect.Type, fields []int) Codec {
	ptr := t.Kind() == reflect.Pointer
	return Codec{Name: name, Type: t,
		Encode: func(w *Wire, v any) ([]byte, error) {
			rv := reflect.ValueOf(v)
			if ptr {
				if rv.IsNil() {
					return json.Marshal(jsonEnvelope{V: json.RawMessage("null")})
				}
				rv = rv.Elem()
			}
			cp := reflect.New(rv.Type()).Elem()
			cp.Set(rv)
			env := jsonEnvelope{Sinks: map[int]SinkRef{}}
			for _, i := range fields {
				f := cp.Field(i)
				if f.IsNil() {
					continue
				}
				ref, err := w.ExportSink(f.Interface().(sink.Sink))
				if err != nil {
					return nil, err
				}
				env.Sinks[i] = ref
				f.SetZero()
			}
			b, err := json.Marshal(cp.Interface())
			if err != nil {
				return nil, err
			}
			env.V = b
			return json.Marshal(env)
		},
		Decode: func(w *Wire, data []byte) (any, error) {
			var env jsonEnvelope
			if err := json.Unmarshal(data, &env); err != nil {
				return nil, err
			}
			st := t
			if ptr {
				st = t.Elem()
				if string(env.V) == "null" {
					return reflect.Zero(t).Interface(), nil
				}
			}
			p := reflect.New(st)
			if err := json.Unmarshal(env.V, p.Interface()); err != nil {
				return nil, err
			}
			for i, ref := range env.Sinks {
				if !slices.Contains(fields, i) {
					return nil, fmt.Errorf("remote: %s: field %d is not a sink", name, i)
				}
				p.Elem().Field(i).Set(reflect.ValueOf(w.ImportSink(ref)))
			}
			if ptr {
				return p.Interface(), nil
			}
			return p.Elem().Interface(), nil
		}}
}

// codecError is the error of an event nobody registered a codec for. It
// is a rejection (the event does not leave this node) that also wraps
// ErrNoCodec.
type codecError struct {
	stage string
	typ   reflect.Type
	err   error // an encoder's own failure, or nil
}

func (e *codecError) Error() string {
	if e.err != nil {
		return fmt.Sprintf("remote: stage %q: encoding %v: %v", e.stage, e.typ, e.err)
	}
	return fmt.Sprintf("remote: stage %q: %v: %v (register one with remote.Register)", e.stage, ErrNoCodec, e.typ)
}

func (e *codecError) Unwrap() []error {
	if e.err != nil {
		return []error{sink.ErrRejected, e.err}
	}
	return []error{sink.ErrRejected, ErrNoCodec}
}

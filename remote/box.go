package remote

import (
	"reflect"
	"unsafe"

	"github.com/sandstorm-go/sandstorm/sink"
)

// appendBoxed appends every value of vs to es as an event. Putting a
// value that is not pointer-shaped into an interface copies it to the
// heap, one allocation per event; here each interface points into vs
// instead (vs must not change afterwards: it is the decoded run's own
// slice, which nothing else holds). A pointer-shaped T (a pointer, map,
// channel, function, or a struct or array holding one such value alone)
// is stored in the interface itself and is appended as usual.
func appendBoxed[T any](es []sink.Event, vs []T) []sink.Event {
	if len(vs) == 0 {
		return es
	}
	if mayBePointerShaped(reflect.TypeFor[T]()) {
		for _, v := range vs {
			es = append(es, v)
		}
		return es
	}
	var first sink.Event = vs[0] // the one copy: it gives the type word
	typ := (*eface)(unsafe.Pointer(&first)).typ
	for i := range vs {
		var e sink.Event
		p := (*eface)(unsafe.Pointer(&e))
		p.typ, p.data = typ, unsafe.Pointer(&vs[i])
		es = append(es, e)
	}
	return es
}

// eface is the layout of an empty interface value (runtime.eface).
type eface struct {
	typ, data unsafe.Pointer
}

// mayBePointerShaped reports whether values of t could be stored in an
// interface directly rather than through a pointer: only a type of a
// pointer's size that holds a pointer can be.
func mayBePointerShaped(t reflect.Type) bool {
	return t.Size() == unsafe.Sizeof(uintptr(0)) && holdsPointers(t)
}

// holdsPointers reports whether values of t hold pointers.
func holdsPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return false
	case reflect.Array:
		return t.Len() > 0 && holdsPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if holdsPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	}
	return true
}

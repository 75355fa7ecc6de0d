package http

import "strings"

// Field is one header field line: a name and its value, with surrounding
// whitespace removed from the value.
type Field struct {
	Name  string
	Value string
}

// Header is an ordered list of header fields. Repeated fields keep their
// order. Names are stored in canonical form (see CanonicalKey); lookups are
// ASCII case-insensitive and do not allocate. A nil Header is empty and
// ready to use.
//
// A Header is a plain slice so that it can be built with a literal and
// ranged over; it is meant for the handful of fields of an HTTP message, not
// for thousands (lookups are linear).
type Header []Field

// Get returns the value of the first field named name, or "".
func (h Header) Get(name string) string {
	for i := range h {
		if equalFold(h[i].Name, name) {
			return h[i].Value
		}
	}
	return ""
}

// Lookup is like Get but also reports whether the field is present.
func (h Header) Lookup(name string) (string, bool) {
	for i := range h {
		if equalFold(h[i].Name, name) {
			return h[i].Value, true
		}
	}
	return "", false
}

// Has reports whether a field named name is present.
func (h Header) Has(name string) bool {
	_, ok := h.Lookup(name)
	return ok
}

// Values returns the values of every field named name, in order, or nil.
func (h Header) Values(name string) []string {
	var vs []string
	for i := range h {
		if equalFold(h[i].Name, name) {
			vs = append(vs, h[i].Value)
		}
	}
	return vs
}

// Count returns the number of fields named name.
func (h Header) Count(name string) int {
	n := 0
	for i := range h {
		if equalFold(h[i].Name, name) {
			n++
		}
	}
	return n
}

// Add appends a field, canonicalizing its name.
func (h *Header) Add(name, value string) {
	*h = append(*h, Field{Name: CanonicalKey(name), Value: value})
}

// Set replaces every field named name by one field with this value, kept at
// the position of the first one (or appended).
func (h *Header) Set(name, value string) {
	s := *h
	for i := range s {
		if equalFold(s[i].Name, name) {
			s[i].Value = value
			rest := s[i+1:].without(name) // filtered in place
			*h = s[:i+1+len(rest)]
			return
		}
	}
	h.Add(name, value)
}

// Del removes every field named name.
func (h *Header) Del(name string) {
	*h = (*h).without(name)
}

// without filters h in place, dropping the fields named name.
func (h Header) without(name string) Header {
	out := h[:0]
	for _, f := range h {
		if !equalFold(f.Name, name) {
			out = append(out, f)
		}
	}
	clear(h[len(out):]) // let the dropped strings be collected
	return out
}

// Clone returns a copy of h that shares no storage with it.
func (h Header) Clone() Header {
	if h == nil {
		return nil
	}
	return append(Header(nil), h...)
}

// CanonicalKey returns the canonical form of a header field name: the first
// letter and every letter after a hyphen upper case, the others lower case
// ("content-type" becomes "Content-Type"). A name that is not a valid token
// is returned unchanged. It does not allocate when name is already
// canonical.
func CanonicalKey(name string) string {
	if name == "" {
		return name
	}
	upper := true
	canonical := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !isTokenByte(c) {
			return name
		}
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			canonical = false
		}
		upper = c == '-'
	}
	if canonical {
		return name
	}
	b := []byte(name)
	canonicalize(b)
	return string(b)
}

// canonicalize rewrites a valid token in place into canonical form.
func canonicalize(b []byte) {
	upper := true
	for i, c := range b {
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		} else if !upper && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
		upper = c == '-'
	}
}

// equalFold reports whether a and b are equal under ASCII case folding.
func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

// tokenTable marks the bytes allowed in a token (RFC 9110 §5.6.2).
var tokenTable = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func isTokenByte(c byte) bool { return tokenTable[c] }

// isToken reports whether s is a non-empty token.
func isToken[S string | []byte](s S) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenTable[s[i]] {
			return false
		}
	}
	return true
}

// isOWS reports whether c is optional whitespace (SP or HTAB).
func isOWS(c byte) bool { return c == ' ' || c == '\t' }

// trimOWS removes leading and trailing SP and HTAB.
func trimOWS[S string | []byte](s S) S {
	for len(s) > 0 && isOWS(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isOWS(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

// hasToken reports whether the comma-separated list v contains token,
// compared case-insensitively (as for Connection and Expect).
func hasToken(v, token string) bool {
	for v != "" {
		var elem string
		if i := strings.IndexByte(v, ','); i >= 0 {
			elem, v = v[:i], v[i+1:]
		} else {
			elem, v = v, ""
		}
		if equalFold(trimOWS(elem), token) {
			return true
		}
	}
	return false
}

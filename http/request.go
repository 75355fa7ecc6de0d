package http

import (
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
)

// inlineFields is how many header fields a Request holds without a separate
// allocation: a wrk or curl head has one to three. A parsed request with
// more has room for them beside it (newRequest).
const inlineFields = 4

// Request is one parsed HTTP/1.x request. It is plain data: every string
// and the Body are owned by the Request (never aliasing the buffers passed
// to Parser.Feed), so a Request can be queued to another stage, kept, or
// encoded. The server stage fills Conn and the principal as it sees fit.
//
// A *Request is a classed, principaled event for package enqueuepred:
// enqueuepred.ClassOf(req) is its class (the X-Class header) and
// enqueuepred.PrincipalOf(req) its principal, so the multiclass, priority
// and session predicates of a stage tell HTTP requests apart.
type Request struct {
	Method string // "GET", "POST", ... (any token)
	// Target is the request-target exactly as received: "/a%20b?x=1",
	// "http://host/p", "*", or "host:443" for CONNECT.
	Target string
	// Path is the decoded, cleaned path of the target: it starts with "/",
	// has no "." or ".." segments and no empty segments, and keeps a trailing
	// slash ("/docs/" stays "/docs/"; "/a/../b/%2e%2e/c" becomes "/c"). It is
	// "*" for the asterisk form and "" for authority-form (CONNECT) and
	// opaque targets. Decoding may produce any byte, including "/" from %2F
	// and NUL from %00: file servers must still confine it to their root.
	Path string
	// RawQuery is the query without the "?" and not decoded; see Query.
	RawQuery string
	Proto    string // "HTTP/1.1"
	Major    int    // always 1
	Minor    int    // 0 or 1 (or a higher digit, handled as 1.1)
	// Host is the authority of an absolute-form target, else the Host field.
	Host    string
	Header  Header
	Trailer Header // fields after a chunked body, never merged into Header
	Body    []byte // the decoded body; nil when there is none
	Chunked bool   // the body came with Transfer-Encoding: chunked
	// Close reports that the connection must be closed after the response:
	// HTTP/1.1 with "Connection: close", or HTTP/1.0 without
	// "Connection: keep-alive".
	Close bool
	// ExpectContinue reports an HTTP/1.1 "Expect: 100-continue" (see
	// Parser.TakeContinue for answering it while the body is outstanding).
	ExpectContinue bool
	// heldByReply says its emitted reply is tracked: the reply's Done may
	// still read the request after the connection let it go, so its
	// memory is not recycled (Connection.recycleLocked).
	heldByReply bool
	// Received is when the last byte of the request was parsed (from
	// Parser.Now).
	Received time.Time
	// class is the service class from the Parser's class header (default
	// "X-Class"), 0 when absent; see Class.
	class int
	// principal is what the server attached as the identity the request
	// runs on behalf of (ServerConfig.Principal); see Principal.
	principal any
	// ctx is the request's context (request_context.go); nil: Background.
	ctx requestContext
	// Conn identifies the connection (copied from Parser.Conn) and Seq is the
	// request's position on it (0, 1, 2, ...), so that responses to
	// pipelined requests can be sent back in order.
	Conn any
	Seq  uint64

	fields [inlineFields]Field // backing store for small Headers
}

// Class is the request's service class: the value of the Parser's class
// header (default "X-Class"), 0 when absent. Higher classes are more
// important. It implements enqueuepred.Classed, so admission predicates
// (multiclass, priority) see it through enqueuepred.ClassOf.
func (r *Request) Class() int { return r.class }

// SetClass sets the request's service class (a server may classify by
// address, cookie or session instead of the header).
func (r *Request) SetClass(c int) { r.class = c }

// Principal is the principal the request runs on behalf of (Whirlwind
// §III.C), for principal-based admission (enqueuepred.PrincipalOf): the
// value attached with SetPrincipal if it is an enqueuepred.Principal or
// carries one (enqueuepred.Principaled), else an anonymous principal. Its
// Class is the request's Class when the attached principal names none.
func (r *Request) Principal() enqueuepred.Principal {
	var p enqueuepred.Principal
	switch v := r.principal.(type) {
	case enqueuepred.Principal:
		p = v
	case *enqueuepred.Principal:
		if v != nil {
			p = *v
		}
	case enqueuepred.Principaled:
		p = v.Principal()
	case string:
		p.ID = v
	}
	if p.Class == 0 {
		p.Class = r.class
	}
	return p
}

// SetPrincipal attaches the identity the request runs on behalf of: an
// enqueuepred.Principal, a value carrying one (enqueuepred.Principaled), a
// string (the principal's ID) or any other value, kept for PrincipalValue.
func (r *Request) SetPrincipal(p any) { r.principal = p }

// PrincipalValue returns the value attached with SetPrincipal (nil if
// none).
func (r *Request) PrincipalValue() any { return r.principal }

// KeepAlive reports whether the connection may stay open after the
// response to this request.
func (r *Request) KeepAlive() bool { return !r.Close }

// ProtoAtLeast reports whether the request's version is at least
// major.minor.
func (r *Request) ProtoAtLeast(major, minor int) bool {
	return r.Major > major || r.Major == major && r.Minor >= minor
}

// Query parses RawQuery. Malformed pairs are skipped, as net/http does; use
// url.ParseQuery(r.RawQuery) to see the error.
func (r *Request) Query() url.Values {
	v, _ := url.ParseQuery(r.RawQuery)
	return v
}

// parseTarget sets Path, RawQuery and, for absolute and authority forms,
// Host, from Target. Its acceptance matches url.ParseRequestURI as used by
// net/http.ReadRequest.
func (r *Request) parseTarget() *Error {
	t := r.Target
	switch {
	case t[0] == '/':
		p, q, _ := strings.Cut(t, "?")
		r.RawQuery = q
		if strings.IndexByte(p, '%') >= 0 {
			d, err := url.PathUnescape(p)
			if err != nil {
				return newError(ErrTarget, "%q: %v", t, err)
			}
			p = d
		}
		r.Path = cleanPath(p)
		return nil
	case t == "*":
		r.Path = "*"
		return nil
	}
	raw := t
	authority := r.Method == "CONNECT"
	if authority {
		raw = "http://" + t
	}
	u, err := url.ParseRequestURI(raw)
	if err != nil {
		return newError(ErrTarget, "%q: %v", t, err)
	}
	r.RawQuery = u.RawQuery
	if u.Host != "" {
		r.Host = u.Host
	}
	switch {
	case u.Opaque != "" || authority && u.Path == "":
		r.Path = ""
	default:
		r.Path = cleanPath(u.Path)
	}
	return nil
}

// cleanPath returns the canonical form of a decoded path: rooted, no "."
// or ".." or empty segments, trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	if isClean(p) {
		return p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// isClean reports whether the rooted path p is already in the form
// cleanPath produces, so that the common case allocates nothing.
func isClean(p string) bool {
	// Walk the segments after each '/'.
	for i := 0; i < len(p); {
		j := strings.IndexByte(p[i+1:], '/')
		var seg string
		if j < 0 {
			seg = p[i+1:]
		} else {
			seg = p[i+1 : i+1+j]
		}
		last := j < 0
		switch {
		case seg == "." || seg == "..":
			return false
		case seg == "" && !last:
			return false // "//"
		}
		if last {
			return true
		}
		i += 1 + j
	}
	return true
}

// A parsed Request, the backing store of its Header and the bytes of its
// head are one object when the head is small enough, sized to fill a size
// class: a Request is 408 bytes, with room for inlineFields fields; a head
// of at most that many fields (a wrk or curl head: under 100 bytes, one to
// three fields) takes 512 bytes with it, or 1 KiB; a head of up to 8
// fields and 360 bytes 1 KiB, with room for 8 fields beside the Request;
// a browser's (300 to 900 bytes, 8 to 16 fields) 2 KiB, with room for 16.
// A larger head has its own allocation. The head's strings and the Header
// point into the object, so it lives as long as any of them, as separate
// copies would.
type (
	requestHead512 struct {
		req  Request
		head [104]byte
	}
	requestHead1K struct {
		req  Request
		head [616]byte
	}
	requestFields8Head1K struct {
		req    Request
		fields [8]Field
		head   [360]byte
	}
	requestFields16Head2K struct {
		req    Request
		fields [16]Field
		head   [1128]byte
	}
	requestFields16 struct {
		req    Request
		fields [16]Field
	}
)

// newRequest returns an empty Request, an empty Header with room for
// fields fields (up to 16), and n bytes to copy its head into, allocated
// together when the head is small enough.
func newRequest(n, fields int) (*Request, Header, []byte) {
	r, h, head, _ := newRequestFrom(nil, n, fields)
	return r, h, head
}

// newRequestFrom is newRequest reusing spare (when not nil) for a head
// of the 512-byte class; it returns the 512-byte object it used or made
// (nil for another class).
func newRequestFrom(spare *requestHead512, n, fields int) (*Request, Header, []byte, *requestHead512) {
	switch {
	case fitsHead512(n, fields):
		b := spare
		if b == nil {
			b = new(requestHead512)
		} else {
			// The head's bytes are overwritten by the copy of the next
			// head (and only its n are read): zeroing the Request is
			// enough: 104 bytes fewer to write, on lines cold at 1024 connections.
			b.req = Request{}
		}
		return &b.req, b.req.fields[:0], b.head[:n:n], b
	}
	r, h, head := newRequestLarger(n, fields)
	return r, h, head, nil
}

// fitsHead512 reports whether a head of n bytes and fields fields is
// made in the 512-byte class (requestHead512).
func fitsHead512(n, fields int) bool {
	return fields <= inlineFields && n <= len(requestHead512{}.head)
}

// newRequestLarger is newRequest for a head beyond the 512-byte class.
func newRequestLarger(n, fields int) (*Request, Header, []byte) {
	switch {
	case fields <= inlineFields && n <= len(requestHead1K{}.head):
		b := new(requestHead1K)
		return &b.req, b.req.fields[:0], b.head[:n:n]
	case fields <= 8 && n <= len(requestFields8Head1K{}.head):
		b := new(requestFields8Head1K)
		return &b.req, b.fields[:0], b.head[:n:n]
	case n <= len(requestFields16Head2K{}.head):
		b := new(requestFields16Head2K)
		return &b.req, b.fields[:0], b.head[:n:n]
	default:
		b := new(requestFields16)
		return &b.req, b.fields[:0], make([]byte, n)
	}
}

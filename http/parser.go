package http

import (
	"bytes"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"
)

// Default limits, used for the zero fields of Limits.
const (
	DefaultMaxLine        = 8 << 10  // request line and chunk-size line bytes
	DefaultMaxHeaderBytes = 64 << 10 // header (or trailer) section bytes
	DefaultMaxHeaders     = 100      // header (or trailer) field lines
	DefaultMaxBody        = 10 << 20 // decoded body bytes
)

// DefaultClassHeader is the header field the Parser reads Request.Class()
// from when Parser.ClassHeader is empty.
const DefaultClassHeader = "X-Class"

// Limits bounds what a Parser accepts and therefore buffers. A zero (or
// negative) field means its default.
type Limits struct {
	// MaxLine bounds the request line (answer 414 URI Too Long when the
	// target is what overflows, 400 otherwise) and each chunk-size line
	// (400).
	MaxLine int
	// MaxHeaderBytes bounds the header section after the request line,
	// line ends included; the trailer section of a chunked body gets the same
	// bound (431).
	MaxHeaderBytes int
	// MaxHeaders bounds the number of header field lines, and of trailer
	// field lines (431).
	MaxHeaders int
	// MaxBody bounds the decoded body: a larger Content-Length, or chunks
	// adding up to more, get 413 Content Too Large.
	MaxBody int64
}

func (l Limits) withDefaults() Limits {
	if l.MaxLine <= 0 {
		l.MaxLine = DefaultMaxLine
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxHeaders <= 0 {
		l.MaxHeaders = DefaultMaxHeaders
	}
	if l.MaxBody <= 0 {
		l.MaxBody = DefaultMaxBody
	}
	return l
}

// parser states
type state uint8

const (
	stateIdle      state = iota // between requests, skipping empty lines
	stateHead                   // looking for the end of the header section
	stateBody                   // reading a Content-Length body
	stateChunkSize              // reading a chunk-size line
	stateChunkData              // reading chunk data
	stateChunkEnd               // reading the CRLF after chunk data
	stateTrailer                // looking for the end of the trailer section
	stateClosed                 // after a request with Close: input is ignored
	stateFailed                 // after an error; the connection is done
)

// Parser is the per-connection HTTP/1.x request parser: a state machine fed
// with the bytes of one connection as they arrive, in pieces of any size,
// which returns each request once it is complete (several per Feed when
// requests are pipelined). It does no I/O and never panics on any input.
//
// Set the exported fields before the first Feed and leave them alone after.
// The zero value is ready to use with default limits. A Parser is not safe
// for concurrent use: a connection is read by one goroutine at a time.
//
// Requests never alias the bytes given to Feed: the header section is
// copied once into a buffer that all of a request's strings share, and the
// body once into Body.
type Parser struct {
	Limits Limits
	// ClassHeader names the header field that gives Request.Class; empty
	// means DefaultClassHeader.
	ClassHeader string
	// NoClass, if set, ignores the class header: every Request.Class is 0
	// (a server's ClientPolicy does not believe this client's claim).
	NoClass bool
	// Now stamps Request.Received; nil means time.Now. Tests give a fixed
	// clock.
	Now func() time.Time
	// Conn is copied into every Request's Conn field.
	Conn any
	// SkipBody, if set, is asked about every request that has a body, once
	// its header section is complete. True means nobody will read the
	// body: the request is returned at once without it, with Close set
	// (the connection cannot be reused), no 100 Continue is invited, and
	// the Parser ignores the rest of its input (Closed).
	SkipBody func(*Request) bool
	// ReserveBody, if set, is asked before the body bytes of r are
	// buffered: n more bytes (the Content-Length, or a chunk's size).
	// False fails the request with ErrBodyBudget (503).
	ReserveBody func(r *Request, n int64) bool

	state state
	err   *Error
	lim   Limits
	// at, if not zero, stamps Request.Received instead of Now: the
	// arriving packet's reading, which a Connection sets before Feed.
	// Calling Now (a Connection's method value, an object of its own)
	// would touch one more cache line per request.
	at time.Time

	// buf holds input not consumed yet, carried over to the next Feed: a
	// partial line or header section. The current element starts at buf[0].
	buf []byte

	// Scanning a header or trailer section, or a chunk-size line; all
	// offsets are relative to the start of the unconsumed input.
	scan      int // bytes already searched for '\n'
	lineStart int // start of the current line
	lines     int // complete lines so far (the request line is line 0)
	hdrStart  int // end of the request line, where the header fields start
	methodEnd int // request line split points
	targetEnd int
	lineEnd   int // end of the request line text (without CRLF)

	req       *Request // the request whose body is being read
	remain    int64    // bytes left in the current body or chunk
	extBytes  int      // chunk extension bytes seen in the current body
	leading   int      // empty-line bytes skipped before a request line
	bodySeen  bool     // some byte after the header section has arrived
	continued bool     // TakeContinue returned true for the current request
	seq       uint64

	// last is the object of the last request made in the 512-byte class
	// (newRequestFrom), spare one given back by recycle for the next.
	last, spare *requestHead512
	// loopSpare, if set (by a Connection), is the spare of the event
	// loop's connections, tried before this Parser's own: recycle gives
	// the request's object to it, so that the next request of any of the
	// loop's connections is made in memory still in the loop's cache
	// (docs/haboob-bench.md, "Cutting the cold lines").
	loopSpare *atomic.Pointer[requestHead512]
}

// Feed parses data, the next bytes received on the connection, and appends
// the requests it completes to dst, in order; it returns the extended dst.
// data is not retained: the bytes of an incomplete request are copied
// into the Parser. After a request with Close, Feed ignores its input (see
// Closed).
//
// On malformed or oversized input Feed returns an *Error wrapping one of the
// Err* sentinels with the status to answer (ErrorResponse builds the
// response), along with the requests completed before the bad one; they
// deserve their responses first. The Parser then stays failed: every later
// Feed returns the same error and nothing else, and the connection should be
// closed after the error response.
func (p *Parser) Feed(dst []*Request, data []byte) ([]*Request, error) {
	if p.state == stateFailed {
		return dst, p.err
	}
	if p.state == stateClosed || len(data) == 0 {
		return dst, nil
	}
	p.lim = p.Limits.withDefaults()

	in := data
	carried := len(p.buf) > 0
	if carried {
		p.buf = append(p.buf, data...)
		in = p.buf
	}
	var now time.Time // read from the clock once per Feed, when needed

	pos := 0
	for {
		var (
			n    int  // bytes consumed by the step
			more bool // the step needs more input
			done bool // p.req is complete
			err  *Error
		)
		s := in[pos:]
		switch p.state {
		case stateIdle:
			n, more, err = p.skipEmptyLines(s)
		case stateHead:
			n, more, done, err = p.head(s)
		case stateBody:
			n, done = p.body(s)
			more = !done
		case stateChunkSize:
			n, more, err = p.chunkSize(s)
		case stateChunkData:
			n = p.chunkData(s)
			more = n == len(s) && p.state == stateChunkData
		case stateChunkEnd:
			n, more, err = p.chunkEnd(s)
		case stateTrailer:
			n, more, done, err = p.trailer(s)
		case stateClosed:
			n = len(s) // RFC 9112 §9.6: no further requests are processed
		}
		pos += n
		if err != nil {
			p.fail(err)
			return dst, err
		}
		if done {
			if now.IsZero() {
				now = p.now()
			}
			dst = append(dst, p.finish(now))
		}
		if more || pos == len(in) {
			break
		}
	}

	rest := in[pos:]
	if p.state != stateIdle && p.state != stateHead && len(rest) > 0 {
		p.bodySeen = true
	}
	switch {
	case carried && pos == 0:
		// Nothing consumed: the input stays where it is, so that a request
		// arriving byte by byte costs linear, not quadratic, time.
	case carried:
		p.buf = p.buf[:copy(p.buf, rest)]
	default:
		p.buf = append(p.buf[:0], rest...)
	}
	if len(p.buf) == 0 && cap(p.buf) > 64<<10 {
		p.buf = nil // do not pin a large buffer to an idle connection
	}
	return dst, nil
}

// Closed reports that the Parser returned a request with Close set (HTTP/1.1
// "Connection: close", or HTTP/1.0 without keep-alive). That request is the
// last one on the connection (RFC 9112 §9.6): the Parser ignores any input
// after it, and the server closes the connection once its response is
// sent.
func (p *Parser) Closed() bool { return p.state == stateClosed }

// Err returns the error that failed the Parser, or nil.
func (p *Parser) Err() error {
	if p.err == nil {
		return nil
	}
	return p.err
}

// Idle reports whether the Parser is between requests with nothing
// buffered: a server applies its keep-alive idle timeout then, and its
// request timeout otherwise.
func (p *Parser) Idle() bool { return p.state == stateIdle && len(p.buf) == 0 }

// Buffered returns how many received bytes the Parser holds that belong to
// an incomplete line or header section.
func (p *Parser) Buffered() int { return len(p.buf) }

// TakeContinue reports whether the request being received asked for
// "Expect: 100-continue", had its header section accepted, and not one byte
// of its body has arrived yet. It returns true at most once per request:
// the caller must then send the interim response (AppendContinue) and the
// client will go on with the body. A server that would rather refuse the
// body answers with a final status and closes the connection instead.
func (p *Parser) TakeContinue() bool {
	if p.req == nil || !p.req.ExpectContinue || p.bodySeen || p.continued {
		return false
	}
	p.continued = true
	return true
}

// Reset makes the Parser ready for a new connection, keeping its settings
// and its buffer's memory.
func (p *Parser) Reset() {
	*p = Parser{
		Limits:      p.Limits,
		ClassHeader: p.ClassHeader,
		NoClass:     p.NoClass,
		Now:         p.Now,
		Conn:        p.Conn,
		buf:         p.buf[:0],
	}
}

// recycle takes back r, a request this Parser returned, whose memory may
// be reused for the next request: the caller guarantees that nothing
// refers to r, its strings or its Header any more. Only the last request
// made in the 512-byte class is taken; recycle reports whether r was.
func (p *Parser) recycle(r *Request) bool {
	if p.last == nil || &p.last.req != r || p.req == r {
		return false
	}
	obj := p.last
	p.last = nil
	if p.loopSpare != nil {
		// The loop's spare is this one now; one it held before stays
		// this Parser's.
		if old := p.loopSpare.Swap(obj); old != nil {
			p.spare = old
		}
		return true
	}
	p.spare = obj
	return true
}

// makeRequest is newRequestFrom with the loop's spare or this Parser's
// own; it records the 512-byte object used (last).
func (p *Parser) makeRequest(n, fields int) (*Request, Header, []byte) {
	spare, own := p.spare, true
	if p.loopSpare != nil && fitsHead512(n, fields) {
		if s := p.loopSpare.Swap(nil); s != nil {
			spare, own = s, false
		}
	}
	r, h, head, obj := newRequestFrom(spare, n, fields)
	if obj != nil {
		if own {
			p.spare = nil
		}
		p.last = obj
	}
	return r, h, head
}

func (p *Parser) now() time.Time {
	if !p.at.IsZero() {
		return p.at
	}
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Parser) fail(err *Error) {
	p.state = stateFailed
	p.err = err
	p.req = nil
	p.buf = nil
}

// finish stamps and returns the completed request and readies the Parser
// for the next one.
func (p *Parser) finish(now time.Time) *Request {
	r := p.req
	r.Received = now
	r.Seq = p.seq
	r.Conn = p.Conn
	p.seq++
	p.req = nil
	p.state = stateIdle
	if r.Close {
		p.state = stateClosed
	}
	p.leading = 0
	p.bodySeen = false
	p.continued = false
	p.extBytes = 0
	return r
}

func (p *Parser) resetScan() {
	p.scan, p.lineStart, p.lines, p.hdrStart = 0, 0, 0, 0
}

// skipEmptyLines drops the CRLFs (or bare LFs) a client may send before a
// request line (RFC 9112 §2.2), then moves to stateHead.
func (p *Parser) skipEmptyLines(s []byte) (n int, more bool, err *Error) {
	for n < len(s) {
		switch s[n] {
		case '\n':
			n++
			continue
		case '\r':
			if n+1 == len(s) {
				more = true // wait: CR LF, or the start of a bad request line
			} else if s[n+1] == '\n' {
				n += 2
				continue
			}
		}
		break
	}
	p.leading += n
	if p.leading > p.lim.MaxLine {
		return n, false, newError(ErrMalformed, "more than %d bytes of empty lines before the request line", p.lim.MaxLine)
	}
	if !more && n < len(s) {
		p.state = stateHead
		p.resetScan()
	}
	return n, more, nil
}

// head scans for the end of the header section, checking the limits line by
// line, and parses it once it is complete. The checks give the same result
// however the input is split.
func (p *Parser) head(s []byte) (n int, more, done bool, err *Error) {
	for {
		i := bytes.IndexByte(s[p.scan:], '\n')
		if i < 0 {
			p.scan = len(s)
			if p.lines == 0 {
				if err := p.checkRequestLineLen(s[p.lineStart:], true); err != nil {
					return 0, false, false, err
				}
			} else if len(s)-p.hdrStart > p.lim.MaxHeaderBytes {
				return 0, false, false, newError(ErrHeaderTooLarge, "header section over %d bytes", p.lim.MaxHeaderBytes)
			}
			return 0, true, false, nil
		}
		end := p.scan + i // index of the '\n'
		p.scan = end + 1
		line := dropCR(s[p.lineStart:end])
		switch {
		case p.lines == 0:
			if err := p.checkRequestLineLen(line, false); err != nil {
				return 0, false, false, err
			}
			if err := p.splitRequestLine(line); err != nil {
				return 0, false, false, err
			}
			p.lineEnd = len(line)
			p.hdrStart = end + 1
		case end+1-p.hdrStart > p.lim.MaxHeaderBytes:
			return 0, false, false, newError(ErrHeaderTooLarge, "header section over %d bytes", p.lim.MaxHeaderBytes)
		case len(line) == 0:
			return p.endOfHead(s[:end+1])
		case p.lines > p.lim.MaxHeaders:
			return 0, false, false, newError(ErrHeaderTooLarge, "more than %d header fields", p.lim.MaxHeaders)
		}
		p.lines++
		p.lineStart = end + 1
	}
}

// checkRequestLineLen applies Limits.MaxLine to a complete request line, or
// to the start of one (partial: a final CR may still be part of the line
// end). The status depends only on the first MaxLine+1 bytes: 414 when they
// reach into the target, 400 when they are all method.
func (p *Parser) checkRequestLineLen(line []byte, partial bool) *Error {
	if partial && len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	if len(line) <= p.lim.MaxLine {
		return nil
	}
	if bytes.IndexByte(line[:p.lim.MaxLine+1], ' ') >= 0 {
		return newError(ErrURITooLong, "request line over %d bytes", p.lim.MaxLine)
	}
	return newError(ErrMalformed, "request line over %d bytes without a space", p.lim.MaxLine)
}

// splitRequestLine checks method SP request-target SP HTTP-version and
// records where the parts are.
func (p *Parser) splitRequestLine(line []byte) *Error {
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 < 0 {
		return newError(ErrMalformed, "request line %s", quote(line))
	}
	sp2 := bytes.IndexByte(line[sp1+1:], ' ')
	if sp2 < 0 {
		return newError(ErrMalformed, "request line %s", quote(line))
	}
	sp2 += sp1 + 1
	method, target, version := line[:sp1], line[sp1+1:sp2], line[sp2+1:]
	if !isToken(method) {
		return newError(ErrMalformed, "method %s", quote(method))
	}
	if len(version) != len("HTTP/1.1") || string(version[:5]) != "HTTP/" ||
		!isDigit(version[5]) || version[6] != '.' || !isDigit(version[7]) {
		return newError(ErrMalformed, "version %s", quote(version))
	}
	if version[5] != '1' {
		return newError(ErrVersion, "%s", version)
	}
	if len(target) == 0 {
		return newError(ErrTarget, "empty request target")
	}
	for _, c := range target {
		if c < ' ' || c == 0x7f {
			return newError(ErrTarget, "control byte in request target %s", quote(target))
		}
	}
	p.methodEnd, p.targetEnd = sp1, sp2
	return nil
}

// endOfHead builds the request from a complete head (request line, fields,
// empty line) and decides how its body is framed.
func (p *Parser) endOfHead(raw []byte) (n int, more, done bool, err *Error) {
	// One private copy of the head; every string of the request is a view of
	// it. The copy is never written after a string is made of it.
	// p.lines counts the request line and the field lines.
	r, fields, h := p.makeRequest(len(raw), p.lines-1)
	copy(h, raw)
	r.Header = fields
	r.Method = str(h[:p.methodEnd])
	r.Target = str(h[p.methodEnd+1 : p.targetEnd])
	r.Proto = str(h[p.targetEnd+1 : p.lineEnd])
	r.Major = int(h[p.targetEnd+6] - '0')
	r.Minor = int(h[p.targetEnd+8] - '0')
	if r.Header, err = parseFields(r.Header, h[p.hdrStart:]); err != nil {
		return 0, false, false, err
	}
	if len(r.Header) == 0 {
		r.Header = nil
	}
	if err := p.checkFields(r); err != nil {
		return 0, false, false, err
	}
	if err := r.parseTarget(); err != nil {
		return 0, false, false, err
	}
	n = len(raw)
	p.req = r
	p.resetScan()
	if (r.Chunked || p.remain > 0) && p.SkipBody != nil && p.SkipBody(r) {
		r.Close = true
		p.remain = 0
		return n, false, true, nil
	}
	if p.remain > p.lim.MaxBody {
		return 0, false, false, newError(ErrBodyTooLarge, "Content-Length %d over %d", p.remain, p.lim.MaxBody)
	}
	if p.remain > 0 && p.ReserveBody != nil && !p.ReserveBody(r, p.remain) {
		return 0, false, false, newError(ErrBodyBudget, "body of %d bytes", p.remain)
	}
	switch {
	case r.Chunked:
		p.state = stateChunkSize
		return n, false, false, nil
	case p.remain > 0:
		p.state = stateBody
		return n, false, false, nil
	}
	return n, false, true, nil
}

// parseFields parses field lines up to and including the empty line that
// ends them, appending to hdr. Names are canonicalized in place in b.
func parseFields(hdr Header, b []byte) (Header, *Error) {
	for {
		i := bytes.IndexByte(b, '\n')
		line := dropCR(b[:i]) // the section ends with an empty line: i >= 0
		b = b[i+1:]
		if len(line) == 0 {
			return hdr, nil
		}
		if isOWS(line[0]) {
			return hdr, newError(ErrObsFold, "line %s", quote(line))
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			return hdr, newError(ErrMalformed, "header line without colon %s", quote(line))
		}
		name := line[:colon]
		if !isToken(name) {
			return hdr, newError(ErrMalformed, "header name %s", quote(name))
		}
		value := trimOWS(line[colon+1:])
		for _, c := range value {
			if c < ' ' && c != '\t' || c == 0x7f {
				return hdr, newError(ErrMalformed, "control byte in %s value", name)
			}
		}
		canonicalize(name)
		hdr = append(hdr, Field{Name: str(name), Value: str(value)})
	}
}

// checkFields interprets the fields that concern the protocol: Host,
// framing, Connection, Expect and the class header.
func (p *Parser) checkFields(r *Request) *Error {
	var (
		hosts      int
		cl         string
		haveCL, te bool
		keepAlive  bool
		codings    []string
	)
	for _, f := range r.Header {
		switch f.Name {
		case "Host":
			hosts++
			if !validHost(f.Value) {
				return newError(ErrHost, "Host %q", f.Value)
			}
			r.Host = f.Value
		case "Content-Length":
			if haveCL && f.Value != cl {
				return newError(ErrContentLength, "conflicting values %q and %q", cl, f.Value)
			}
			haveCL, cl = true, f.Value
		case "Transfer-Encoding":
			te = true
			codings = appendList(codings, f.Value)
		case "Connection":
			if hasToken(f.Value, "close") {
				r.Close = true
			} else if hasToken(f.Value, "keep-alive") && r.Minor == 0 {
				keepAlive = true
			}
		case "Expect":
			if r.Minor >= 1 && hasToken(f.Value, "100-continue") {
				r.ExpectContinue = true
			}
		}
	}
	if r.Minor == 0 && !keepAlive {
		r.Close = true
	}
	if hosts > 1 {
		return newError(ErrHost, "%d Host fields", hosts)
	}
	if hosts == 0 && r.Minor >= 1 && r.Method != "CONNECT" {
		return newError(ErrHost, "HTTP/1.1 request without Host")
	}
	if err := p.parseClass(r); err != nil {
		return err
	}

	p.remain = 0
	switch {
	case te && r.Minor == 0:
		return newError(ErrFraming, "Transfer-Encoding in an HTTP/1.0 request")
	case te && haveCL:
		return newError(ErrFraming, "both Content-Length and Transfer-Encoding")
	case te:
		chunked := 0
		for _, c := range codings {
			if !equalFold(c, "chunked") {
				return newError(ErrUnsupportedTE, "%q", c)
			}
			chunked++
		}
		if chunked != 1 {
			return newError(ErrFraming, "Transfer-Encoding %q", codings)
		}
		r.Chunked = true
	case haveCL:
		n, ok := parseDecimal(cl)
		if !ok {
			return newError(ErrContentLength, "%q", cl)
		}
		p.remain = n // checked against MaxBody in endOfHead, after SkipBody
	}
	return nil
}

// parseClass sets the request's class from the class header. A value that is not a
// small decimal integer, or conflicting values, are an error rather than
// being ignored.
func (p *Parser) parseClass(r *Request) *Error {
	if p.NoClass {
		return nil
	}
	name := p.ClassHeader
	if name == "" {
		name = DefaultClassHeader
	}
	seen := ""
	for _, f := range r.Header {
		if !equalFold(f.Name, name) {
			continue
		}
		if seen != "" && f.Value != seen {
			return newError(ErrMalformed, "conflicting %s values %q and %q", name, seen, f.Value)
		}
		seen = f.Value
		n, ok := parseDecimal(f.Value)
		if !ok || n > 1<<30 {
			return newError(ErrMalformed, "%s %q is not a class number", name, f.Value)
		}
		r.class = int(n)
	}
	return nil
}

// body consumes Content-Length body bytes.
func (p *Parser) body(s []byte) (n int, done bool) {
	n = int(min(int64(len(s)), p.remain))
	r := p.req
	if r.Body == nil {
		// Size the buffer for what has arrived, not for what is declared: a
		// large Content-Length alone must not make the server allocate.
		r.Body = make([]byte, 0, max(int64(n), min(p.remain, 32<<10)))
	}
	r.Body = append(r.Body, s[:n]...)
	p.remain -= int64(n)
	if n > 0 {
		p.bodySeen = true
	}
	return n, p.remain == 0
}

// chunkSize parses chunk-size [ chunk-ext ] CRLF. Chunk lines must end in
// CRLF (RFC 9112 §7.1 and erratum 7633); extensions are skipped, their
// total size bounded.
func (p *Parser) chunkSize(s []byte) (n int, more bool, err *Error) {
	if len(s) > 0 {
		p.bodySeen = true
	}
	i := bytes.IndexByte(s[p.scan:], '\n')
	if i < 0 {
		p.scan = len(s)
		if line := dropCR(s); len(line) > p.lim.MaxLine {
			return 0, false, newError(ErrChunk, "chunk-size line over %d bytes", p.lim.MaxLine)
		}
		return 0, true, nil
	}
	end := p.scan + i
	line := s[:end]
	if len(line) == 0 || line[len(line)-1] != '\r' {
		return 0, false, newError(ErrChunk, "chunk-size line not ended by CRLF")
	}
	line = line[:len(line)-1]
	if len(line) > p.lim.MaxLine {
		return 0, false, newError(ErrChunk, "chunk-size line over %d bytes", p.lim.MaxLine)
	}
	if bytes.IndexByte(line, '\r') >= 0 {
		return 0, false, newError(ErrChunk, "CR inside chunk-size line")
	}
	size, digits, ok := parseHex(line)
	if !ok {
		return 0, false, newError(ErrChunk, "chunk size %s", quote(line))
	}
	ext := trimOWS(line[digits:])
	if len(ext) > 0 && ext[0] != ';' {
		return 0, false, newError(ErrChunk, "chunk-size line %s", quote(line))
	}
	p.extBytes += len(line) - digits
	if p.extBytes > p.lim.MaxHeaderBytes {
		return 0, false, newError(ErrChunk, "chunk extensions over %d bytes", p.lim.MaxHeaderBytes)
	}
	n = end + 1
	p.scan = 0
	if size == 0 {
		p.state = stateTrailer
		p.resetScan()
		return n, false, nil
	}
	if int64(len(p.req.Body))+size > p.lim.MaxBody {
		return 0, false, newError(ErrBodyTooLarge, "chunked body over %d bytes", p.lim.MaxBody)
	}
	if p.ReserveBody != nil && !p.ReserveBody(p.req, size) {
		return 0, false, newError(ErrBodyBudget, "chunk of %d bytes", size)
	}
	p.remain = size
	p.state = stateChunkData
	return n, false, nil
}

// chunkData consumes chunk data.
func (p *Parser) chunkData(s []byte) int {
	n := int(min(int64(len(s)), p.remain))
	p.req.Body = append(p.req.Body, s[:n]...)
	p.remain -= int64(n)
	if p.remain == 0 {
		p.state = stateChunkEnd
	}
	return n
}

// chunkEnd checks the CRLF after chunk data.
func (p *Parser) chunkEnd(s []byte) (n int, more bool, err *Error) {
	switch {
	case len(s) >= 2 && s[0] == '\r' && s[1] == '\n':
		p.state = stateChunkSize
		p.scan = 0
		return 2, false, nil
	case len(s) == 0 || len(s) == 1 && s[0] == '\r':
		return 0, true, nil
	}
	return 0, false, newError(ErrChunk, "chunk data not followed by CRLF")
}

// trailer scans the trailer section like a header section and parses it
// into Request.Trailer.
func (p *Parser) trailer(s []byte) (n int, more, done bool, err *Error) {
	for {
		i := bytes.IndexByte(s[p.scan:], '\n')
		if i < 0 {
			p.scan = len(s)
			if len(s) > p.lim.MaxHeaderBytes {
				return 0, false, false, newError(ErrHeaderTooLarge, "trailer section over %d bytes", p.lim.MaxHeaderBytes)
			}
			return 0, true, false, nil
		}
		end := p.scan + i
		p.scan = end + 1
		line := dropCR(s[p.lineStart:end])
		switch {
		case end+1 > p.lim.MaxHeaderBytes:
			return 0, false, false, newError(ErrHeaderTooLarge, "trailer section over %d bytes", p.lim.MaxHeaderBytes)
		case len(line) == 0:
			if p.lines > 0 {
				t := make([]byte, end+1)
				copy(t, s)
				if p.req.Trailer, err = parseFields(nil, t); err != nil {
					return 0, false, false, err
				}
			}
			p.resetScan()
			return end + 1, false, true, nil
		case p.lines >= p.lim.MaxHeaders:
			return 0, false, false, newError(ErrHeaderTooLarge, "more than %d trailer fields", p.lim.MaxHeaders)
		}
		p.lines++
		p.lineStart = end + 1
	}
}

// str returns a string that shares b's memory. Only for the private copies
// made by the parser, which are never modified once viewed as strings.
func str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// dropCR removes one CR before a line's LF, or the last CR of a partial
// line, which may be the start of its CRLF.
func dropCR(line []byte) []byte {
	if len(line) > 0 && line[len(line)-1] == '\r' {
		return line[:len(line)-1]
	}
	return line
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// parseDecimal parses 1*DIGIT (at most 18 digits, so no overflow).
func parseDecimal(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}

// parseHex parses the chunk-size at the start of line: hex digits, leading
// zeros allowed, at most 15 significant digits. It returns the value and
// how many bytes it used.
func parseHex(line []byte) (n int64, used int, ok bool) {
	sig := 0
	for used < len(line) {
		c := line[used]
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return n, used, used > 0
		}
		if n > 0 || d > 0 {
			sig++
			if sig > 15 {
				return 0, used, false
			}
		}
		n = n<<4 | int64(d)
		used++
	}
	return n, used, used > 0
}

// appendList appends the elements of a comma-separated list, each without
// parameters and surrounding whitespace, skipping empty elements.
func appendList(dst []string, v string) []string {
	for v != "" {
		elem := v
		if i := strings.IndexByte(v, ','); i >= 0 {
			elem, v = v[:i], v[i+1:]
		} else {
			v = ""
		}
		if i := strings.IndexByte(elem, ';'); i >= 0 {
			elem = elem[:i]
		}
		if elem = trimOWS(elem); elem != "" {
			dst = append(dst, elem)
		}
	}
	return dst
}

// validHost reports whether a Host value has only the bytes of
// uri-host [":" port] (RFC 9110 §7.2), as net/http's server checks.
func validHost(h string) bool {
	for i := 0; i < len(h); i++ {
		if !hostTable[h[i]] {
			return false
		}
	}
	return true
}

var hostTable = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!$%&'()*+,-.:;=[]_~" {
		t[c] = true
	}
	return t
}()

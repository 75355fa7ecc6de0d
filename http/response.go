package http

import (
	"fmt"
	"html"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
)

// DefaultServer is the Server header value of a Formatter whose Server
// field is empty.
const DefaultServer = "Sandstorm"

// Response is an HTTP response to format with a Formatter (or
// AppendHeader). The formatter writes the status line, Date, Server,
// Content-Length and Connection itself; Header carries the other fields
// (Content-Type, Location, Retry-After, ...) in order. Content-Length,
// Connection and Transfer-Encoding fields in Header are not copied: the
// length is that of the body, and "Connection: close" in Header has the
// effect of Close.
//
// The zero value is an empty 200 response.
type Response struct {
	Status int // 0 means 200
	Header Header
	// Body is the payload. When it is nil, the payload is ContentLength
	// bytes that the caller sends after the header itself (Reply.Body, a
	// Stream), or File's.
	Body          []byte
	ContentLength int64
	// File, if set, is the payload: a region of an open file, sent with
	// sendfile on a plain connection (see FileBody). Body is then nil and
	// ContentLength is File.Length.
	File *FileBody
	// Close makes the response announce "Connection: close": the server
	// closes the connection once it is sent.
	Close bool
	// Prepared, if set, is PrepareHeader(Header): HTTP/1.1 copies its
	// formatted fields instead of formatting Header's. It is ignored
	// unless made from this very Header (see PrepareHeader).
	Prepared *PreparedHeader
}

// FileBody is a response payload that is a region of an open file:
// Length bytes from Offset. A Reply whose Resp.File is set hands the
// Connection one reference to File, which the Connection releases exactly
// once: when the bytes are written to the kernel, when the reply is
// dropped or refused, or at once when the response carries no body (HEAD,
// 304). An HTTP/1.1 connection sends it with sendfile(2) from its event
// loop; a TLS connection reads it (pread) into memory and encrypts it.
// Another writer (an HTTP/2 stream) reads it with File.ReadAt(p,
// Offset+k), which is safe for concurrent use, and calls File.Release
// once done with it.
type FileBody struct {
	File   *aio.SharedFile
	Offset int64
	Length int64
}

// NewFileBodyResponse returns a response with a status, a Content-Type
// (none if contentType is empty) and a file body of length bytes of f
// from offset; it takes over one reference to f.
func NewFileBodyResponse(status int, contentType string, f *aio.SharedFile, offset, length int64) *Response {
	r := NewResponse(status, contentType, nil)
	r.ContentLength = length
	r.File = &FileBody{File: f, Offset: offset, Length: length}
	return r
}

// release gives back the reference a response's file body holds (none:
// nothing).
func (r *Response) release() {
	if r != nil && r.File != nil && r.File.File != nil {
		r.File.File.Release()
	}
}

// NewResponse returns a response with a status, a Content-Type (none if
// contentType is empty) and an in-memory body.
func NewResponse(status int, contentType string, body []byte) *Response {
	r := &Response{Status: status, Body: body}
	if contentType != "" {
		r.Header = Header{{Name: "Content-Type", Value: contentType}}
	}
	return r
}

// NewFileResponse returns a response whose body of length bytes the caller
// sends itself after the header, for example from a file.
func NewFileResponse(status int, contentType string, length int64) *Response {
	r := NewResponse(status, contentType, nil)
	r.ContentLength = length
	return r
}

// OK returns a 200 response with this body.
func OK(contentType string, body []byte) *Response {
	return NewResponse(StatusOK, contentType, body)
}

// StatusResponse returns a response with a short plain-text body naming
// the status, such as "404 Not Found\n". Use it for error statuses that
// have no constructor of their own.
func StatusResponse(status int) *Response {
	body := strconv.Itoa(status) + " " + StatusText(status) + "\n"
	return NewResponse(status, "text/plain; charset=utf-8", []byte(body))
}

// BadRequest returns a 400 response.
func BadRequest() *Response { return StatusResponse(StatusBadRequest) }

// Forbidden returns a 403 response.
func Forbidden() *Response { return StatusResponse(StatusForbidden) }

// NotFound returns a 404 response.
func NotFound() *Response { return StatusResponse(StatusNotFound) }

// InternalServerError returns a 500 response.
func InternalServerError() *Response { return StatusResponse(StatusInternalServerError) }

// ServiceUnavailable returns a 503 response, the answer to a request that
// admission control rejected. A positive retryAfter adds Retry-After in
// whole seconds, rounded up.
func ServiceUnavailable(retryAfter time.Duration) *Response {
	r := StatusResponse(StatusServiceUnavailable)
	if retryAfter > 0 {
		secs := (retryAfter + time.Second - 1) / time.Second
		r.Header = append(r.Header, Field{Name: "Retry-After", Value: strconv.FormatInt(int64(secs), 10)})
	}
	return r
}

// Redirect returns a redirect to location, which must already be a valid
// URI reference (percent-encoded). code should be 301, 302, 303, 307 or
// 308; a code outside 300-399 is replaced by 302.
func Redirect(location string, code int) *Response {
	if code < 300 || code > 399 {
		code = StatusFound
	}
	body := "<a href=\"" + html.EscapeString(location) + "\">" + StatusText(code) + "</a>.\n"
	r := NewResponse(code, "text/html; charset=utf-8", []byte(body))
	r.Header = append(r.Header, Field{Name: "Location", Value: location})
	return r
}

// NotModified returns a 304 response, which has no body. Add ETag or
// Last-Modified to its Header as needed.
func NotModified() *Response { return &Response{Status: StatusNotModified} }

// PartialContent returns a 206 response for bytes first..last (inclusive)
// of a representation of total bytes. body holds those bytes, or is nil
// when the caller sends them itself. It panics if first..last is not a
// range within total or body has another length: those are bugs in the
// caller's range handling, which must answer 416 to unsatisfiable ranges.
func PartialContent(contentType string, first, last, total int64, body []byte) *Response {
	if first < 0 || last < first || last >= total || body != nil && int64(len(body)) != last-first+1 {
		panic(fmt.Sprintf("http: PartialContent(%d, %d, %d) with %d body bytes", first, last, total, len(body)))
	}
	r := NewResponse(StatusPartialContent, contentType, body)
	r.ContentLength = last - first + 1
	r.Header = append(r.Header, Field{Name: "Content-Range",
		Value: "bytes " + strconv.FormatInt(first, 10) + "-" + strconv.FormatInt(last, 10) + "/" + strconv.FormatInt(total, 10)})
	return r
}

// ErrorResponse returns the response to a request the Parser rejected: the
// status of err (see StatusOf) with "Connection: close". The body names the
// status only; it never echoes the request.
func ErrorResponse(err error) *Response {
	r := StatusResponse(StatusOf(err))
	r.Close = true
	return r
}

// AppendContinue appends the interim "100 Continue" response (see
// Parser.TakeContinue).
func AppendContinue(dst []byte) []byte {
	return append(dst, "HTTP/1.1 100 Continue\r\n\r\n"...)
}

// status returns the code to send: 200 for 0, 500 for a code that is not
// three digits.
func (r *Response) status() int {
	switch {
	case r.Status == 0:
		return StatusOK
	case r.Status < 100 || r.Status > 999:
		return StatusInternalServerError
	}
	return r.Status
}

// length is the payload length: len(Body), or ContentLength for a body the
// caller sends.
func (r *Response) length() int64 {
	if r.Body != nil {
		return int64(len(r.Body))
	}
	return max(r.ContentLength, 0)
}

// noBody reports a status that never has content (RFC 9110 §6.4.1).
func noBody(status int) bool {
	return status < 200 || status == StatusNoContent || status == StatusNotModified
}

// SendsBody reports whether the body follows the header on the wire: not
// for HEAD requests nor for 1xx, 204 and 304 responses. A caller that sends
// a file body uses it to decide whether to send the file.
func (r *Response) SendsBody(req *Request) bool {
	return !noBody(r.status()) && (req == nil || req.Method != "HEAD")
}

// KeepAlive reports whether the connection stays open after this response
// to req: neither side asked to close. A nil req (a parse error before any
// request) means close.
func (r *Response) KeepAlive(req *Request) bool {
	if req == nil || req.Close || r.Close {
		return false
	}
	if p := r.prepared(); p != nil {
		return !p.close
	}
	return !hasToken(r.Header.Get("Connection"), "close")
}

// AppendHeader appends the status line and header fields of r, answering
// req, to dst. It formats Date from now on every call; a Formatter caches
// it.
func (r *Response) AppendHeader(dst []byte, req *Request, now time.Time) []byte {
	var f Formatter
	return f.AppendHeader(dst, r, req, now)
}

// Append appends the header and, if SendsBody, the in-memory Body.
func (r *Response) Append(dst []byte, req *Request, now time.Time) []byte {
	var f Formatter
	return f.Append(dst, r, req, now)
}

// Formatter formats responses. It caches the Date value for the current
// second. The zero value is ready to use; a Formatter is safe for
// concurrent use, so one can serve all the goroutines of a stage.
type Formatter struct {
	// Server is the Server header value; "" means DefaultServer. A Server
	// field in a Response's Header takes precedence.
	Server string

	date atomic.Pointer[cachedDate]
}

type cachedDate struct {
	sec int64
	b   [len(TimeFormat)]byte
}

// TimeFormat is the layout of HTTP dates (IMF-fixdate, RFC 9110 §5.6.7),
// for time.Format on UTC times.
const TimeFormat = "Mon, 02 Jan 2006 15:04:05 GMT"

// Obsolete HTTP date formats a recipient must still accept (RFC 9110
// §5.6.7).
const (
	rfc850Format  = "Monday, 02-Jan-06 15:04:05 GMT"
	asctimeFormat = "Mon Jan _2 15:04:05 2006"
)

// ParseTime parses an HTTP date in any of the three formats of RFC 9110
// §5.6.7: IMF-fixdate (TimeFormat), the obsolete RFC 850 format and
// ANSI C's asctime format, like net/http.ParseTime. The result is in UTC.
func ParseTime(text string) (time.Time, error) {
	var err error
	for _, layout := range [...]string{TimeFormat, rfc850Format, asctimeFormat} {
		var t time.Time
		if t, err = time.Parse(layout, text); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, err
}

// AppendDate appends now as an HTTP date, from the cache when now is in the
// second last formatted.
func (f *Formatter) AppendDate(dst []byte, now time.Time) []byte {
	sec := now.Unix()
	if c := f.date.Load(); c != nil && c.sec == sec {
		return append(dst, c.b[:]...)
	}
	c := &cachedDate{sec: sec}
	appendHTTPDate(c.b[:0], now)
	f.date.Store(c)
	return append(dst, c.b[:]...)
}

// Append appends the header and, if SendsBody, the in-memory Body.
func (f *Formatter) Append(dst []byte, r *Response, req *Request, now time.Time) []byte {
	dst = f.AppendHeader(dst, r, req, now)
	if r.SendsBody(req) {
		dst = append(dst, r.Body...)
	}
	return dst
}

// AppendHeader appends the status line and header fields of r, answering
// req (nil when there was no valid request), to dst: lines end in CRLF and
// the header ends with an empty line. The response is always HTTP/1.1
// (RFC 9110 §6.2). Field values have control bytes replaced by spaces and
// field names their non-token bytes by '_', so no content of a Header can
// split the response.
func (f *Formatter) AppendHeader(dst []byte, r *Response, req *Request, now time.Time) []byte {
	status := r.status()
	if status >= 0 && status < len(statusLines) && statusLines[status] != "" {
		dst = append(dst, statusLines[status]...)
	} else {
		dst = append(dst, "HTTP/1.1 "...)
		dst = strconv.AppendInt(dst, int64(status), 10)
		dst = append(dst, ' ')
		dst = append(dst, StatusText(status)...)
		dst = append(dst, "\r\n"...)
	}

	p := r.prepared()
	if p != nil && !p.date || p == nil && !r.Header.Has("Date") {
		dst = append(dst, "Date: "...)
		dst = f.AppendDate(dst, now)
		dst = append(dst, "\r\n"...)
	}
	if p != nil && !p.server || p == nil && !r.Header.Has("Server") {
		server := f.Server
		if server == "" {
			server = DefaultServer
		}
		dst = appendField(dst, "Server", server)
	}
	if p != nil {
		dst = append(dst, p.wire...)
	} else {
		for _, h := range r.Header {
			if !framingField(h.Name) {
				dst = appendField(dst, h.Name, h.Value)
			}
		}
	}
	if !noBody(status) {
		dst = append(dst, "Content-Length: "...)
		dst = strconv.AppendInt(dst, r.length(), 10)
		dst = append(dst, "\r\n"...)
	}
	switch {
	case !r.KeepAlive(req):
		dst = append(dst, "Connection: close\r\n"...)
	case req.Minor == 0:
		dst = append(dst, "Connection: keep-alive\r\n"...)
	}
	return append(dst, "\r\n"...)
}

// statusLines holds the status line, "HTTP/1.1 200 OK\r\n", of every
// status with a reason phrase, built once.
var statusLines = func() (lines [600]string) {
	for code := range lines {
		if text := StatusText(code); text != "" {
			lines[code] = "HTTP/1.1 " + strconv.Itoa(code) + " " + text + "\r\n"
		}
	}
	return lines
}()

// appendField appends "name: value\r\n", neutralizing bytes that would end
// the line or the name early. A name that is a token and a value without
// control bytes (the rule) are appended whole.
func appendField(dst []byte, name, value string) []byte {
	if name == "" {
		name = "_"
	}
	if isToken(name) {
		dst = append(dst, name...)
	} else {
		for i := 0; i < len(name); i++ {
			c := name[i]
			if !isTokenByte(c) {
				c = '_'
			}
			dst = append(dst, c)
		}
	}
	dst = append(dst, ": "...)
	if i := controlByte(value); i < 0 {
		dst = append(dst, value...)
	} else {
		dst = append(dst, value[:i]...)
		for ; i < len(value); i++ {
			c := value[i]
			if c < ' ' && c != '\t' || c == 0x7f {
				c = ' '
			}
			dst = append(dst, c)
		}
	}
	return append(dst, "\r\n"...)
}

// controlByte is the index of the first byte of a field value that is
// sent as a space (a control byte other than tab, or DEL), -1 if none.
func controlByte(v string) int {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return i
		}
	}
	return -1
}

var (
	dayNames   = [7]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	monthNames = [12]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
)

// appendHTTPDate appends t in TimeFormat, in GMT, without the cost of
// time.AppendFormat.
func appendHTTPDate(dst []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	hour, minute, second := t.Clock()
	dst = append(dst, dayNames[t.Weekday()]...)
	dst = append(dst, ", "...)
	dst = append2(dst, day)
	dst = append(dst, ' ')
	dst = append(dst, monthNames[month-1]...)
	dst = append(dst, ' ')
	year = max(0, min(year, 9999)) // IMF-fixdate has four digits
	dst = append2(dst, year/100)
	dst = append2(dst, year%100)
	dst = append(dst, ' ')
	dst = append2(dst, hour)
	dst = append(dst, ':')
	dst = append2(dst, minute)
	dst = append(dst, ':')
	dst = append2(dst, second)
	return append(dst, " GMT"...)
}

func append2(dst []byte, n int) []byte {
	return append(dst, byte('0'+n/10), byte('0'+n%10))
}

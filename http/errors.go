package http

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the Parser returns is an *Error that wraps
// exactly one of these, so callers can test the cause with errors.Is and
// read the status to answer with from (*Error).Status or StatusOf.
var (
	// ErrMalformed: the request line or a header field is not valid syntax
	// (400).
	ErrMalformed = errors.New("http: malformed request")
	// ErrTarget: the request-target cannot be parsed, for example a bad
	// percent-escape (400).
	ErrTarget = errors.New("http: invalid request target")
	// ErrObsFold: a header line starts with whitespace (obsolete line
	// folding), which RFC 9112 §5.2 lets a server reject (400).
	ErrObsFold = errors.New("http: obsolete header line folding")
	// ErrHost: an HTTP/1.1 request without Host, several Host fields, or an
	// invalid Host value (400, RFC 9112 §3.2).
	ErrHost = errors.New("http: missing or invalid Host header")
	// ErrContentLength: an invalid Content-Length, or several that disagree
	// (400).
	ErrContentLength = errors.New("http: invalid Content-Length")
	// ErrFraming: the body length cannot be determined safely: both
	// Content-Length and Transfer-Encoding, Transfer-Encoding in an HTTP/1.0
	// request, or "chunked" not applied exactly once as the final coding
	// (400, RFC 9112 §6.1 and §6.3; these are request smuggling vectors).
	ErrFraming = errors.New("http: ambiguous message framing")
	// ErrChunk: a chunked body is malformed (400).
	ErrChunk = errors.New("http: malformed chunked body")
	// ErrBodyTooLarge: the body exceeds Limits.MaxBody (413).
	ErrBodyTooLarge = errors.New("http: request body too large")
	// ErrURITooLong: the request line exceeds Limits.MaxLine (414).
	ErrURITooLong = errors.New("http: request URI too long")
	// ErrHeaderTooLarge: the header or trailer section exceeds
	// Limits.MaxHeaderBytes or Limits.MaxHeaders (431).
	ErrHeaderTooLarge = errors.New("http: request header fields too large")
	// ErrUnsupportedTE: a transfer coding other than chunked (501).
	ErrUnsupportedTE = errors.New("http: unsupported transfer encoding")
	// ErrMethod: a method the server does not serve on a connection, such
	// as CONNECT (400; the connection is closed).
	ErrMethod = errors.New("http: method not supported")
	// ErrBodyBudget: buffering the body would pass the server's budget for
	// request bodies (503, Parser.ReserveBody).
	ErrBodyBudget = errors.New("http: request body budget exhausted")
	// ErrVersion: the protocol version is not HTTP/1.x (505).
	ErrVersion = errors.New("http: unsupported HTTP version")
)

// Error is a request the Parser rejected. Status is the response code to
// send before closing the connection (see ErrorResponse).
type Error struct {
	Status int    // 400, 413, 414, 431, 501, 503 or 505
	Err    error  // one of the sentinel errors above
	Detail string // what exactly was wrong, for logs; may quote input
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return e.Err.Error()
	}
	return e.Err.Error() + ": " + e.Detail
}

func (e *Error) Unwrap() error { return e.Err }

// StatusOf returns the HTTP status code that answers err: the Status of an
// *Error in its chain, or 500 for any other non-nil error, or 200 for nil.
func StatusOf(err error) int {
	if err == nil {
		return StatusOK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return StatusInternalServerError
}

// statusFor maps each sentinel to its status code.
func statusFor(sentinel error) int {
	switch sentinel {
	case ErrBodyTooLarge:
		return StatusContentTooLarge
	case ErrURITooLong:
		return StatusURITooLong
	case ErrHeaderTooLarge:
		return StatusRequestHeaderFieldsTooLarge
	case ErrUnsupportedTE:
		return StatusNotImplemented
	case ErrVersion:
		return StatusHTTPVersionNotSupported
	case ErrBodyBudget:
		return StatusServiceUnavailable
	default:
		return StatusBadRequest
	}
}

// newError builds the *Error for a sentinel. Quoted input is cut short so
// that an error never holds a large part of a hostile request.
func newError(sentinel error, format string, args ...any) *Error {
	return &Error{Status: statusFor(sentinel), Err: sentinel, Detail: fmt.Sprintf(format, args...)}
}

// quote returns a short, printable rendering of untrusted input for error
// details.
func quote(b []byte) string {
	const max = 64
	if len(b) > max {
		return fmt.Sprintf("%q...", b[:max])
	}
	return fmt.Sprintf("%q", b)
}

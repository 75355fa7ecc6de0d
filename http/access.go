package http

import (
	"net"
	"time"
)

// AccessRecord is what a server knows of one response when it hands it
// to the socket: an access log's line (ServerConfig.OnResponse).
type AccessRecord struct {
	RemoteAddr net.Addr
	// Time is when the request arrived (its last byte parsed), or when the
	// response was sent for the server's answers to requests that did not
	// parse.
	Time time.Time
	// Method, Target (as received) and Proto ("HTTP/1.1") of the request;
	// empty for the server's answers to requests that did not parse or
	// timed out.
	Method, Target, Proto string
	Status                int
	// Bytes is the response body's length (0 for HEAD, 304 and other
	// responses without content).
	Bytes              int64
	Referer, UserAgent string
	// Duration runs from the request's arrival to its response being
	// handed to the socket (0 when unknown).
	Duration time.Duration
	TLS      bool // the connection is HTTPS
}

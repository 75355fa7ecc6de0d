package nethttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// StatusError is an error with an HTTP status: a decoder returns one for a
// bad request, a stage answers with one (Request.Fail(nethttp.Error(404,
// "no such order"))) to choose the status its caller gets.
type StatusError struct {
	Code    int
	Message string // sent to the client; empty: the status text
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%d %s", e.Code, http.StatusText(e.Code))
	}
	return fmt.Sprintf("%d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// Error returns a *StatusError with code and message.
func Error(code int, message string) error { return &StatusError{Code: code, Message: message} }

// StatusOf maps the outcome of a call to a stage to an HTTP status; front
// is the name of the stage that admitted the request (empty: unknown).
//
//	nil                                 200 OK
//	a *StatusError                      its Code
//	sink.ErrRejected, sink.ErrClosed,
//	stage.ErrCallAbandoned              503 Service Unavailable (+ Retry-After)
//	context.DeadlineExceeded            504 Gateway Timeout
//	context.Canceled (client gone)      499 (nothing is written)
//	stage.CallError of another stage    502 Bad Gateway
//	any other failure                   500 Internal Server Error
func StatusOf(err error, front string) int {
	var se *StatusError
	var ce *stage.CallError
	switch {
	case err == nil:
		return http.StatusOK
	case errors.As(err, &se):
		return se.Code
	case errors.Is(err, sink.ErrRejected), errors.Is(err, sink.ErrClosed), errors.Is(err, stage.ErrCallAbandoned):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, context.Canceled):
		return StatusClientClosed
	case errors.As(err, &ce) && ce.Stage != "" && front != "" && ce.Stage != front:
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}

// StatusClientClosed (nginx's 499) is StatusOf's status for a request
// whose client went away; nothing is written for it.
const StatusClientClosed = 499

// Handler serves HTTP requests through a stage: each request is decoded
// into a Req, enqueued on Sink as a *stage.Request[Req, Resp] carrying the
// request's context, and the stage's answer is encoded. See StatusOf for
// the status of each outcome. The zero values of the optional fields are
// sensible defaults.
type Handler[Req, Resp any] struct {
	// Sink is the stage that takes the requests (Stage.Sink).
	Sink sink.Sink
	// Decode turns an HTTP request into a Req; return a *StatusError for
	// a bad request (any other error is a 400 too).
	Decode func(r *http.Request) (Req, error)
	// Encode writes a successful answer; nil: JSON with status 200.
	Encode func(w http.ResponseWriter, resp Resp) error
	// Timeout bounds the wait for the answer (0: only the request's own
	// context); past it the client gets 504.
	Timeout time.Duration
	// RetryAfter is the Retry-After sent with 503 (0 → 1s; rounded up to
	// whole seconds).
	RetryAfter time.Duration
	// Logger gets a debug line per failed request (nil: none).
	Logger *slog.Logger
}

// MaxBodyBytes bounds the JSON bodies JSON reads.
const MaxBodyBytes = 1 << 20

// JSON returns a Handler that decodes the request body as JSON into Req
// (at most MaxBodyBytes, unknown fields refused) and writes Resp as JSON.
func JSON[Req, Resp any](s sink.Sink) *Handler[Req, Resp] {
	return &Handler[Req, Resp]{Sink: s, Decode: DecodeJSON[Req]}
}

// DecodeJSON decodes r's body as one JSON value of type T, refusing
// unknown fields and bodies over MaxBodyBytes (400, or 413 when too big).
func DecodeJSON[T any](r *http.Request) (T, error) {
	var v T
	body := http.MaxBytesReader(nil, r.Body, MaxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return v, Error(http.StatusRequestEntityTooLarge, err.Error())
		}
		return v, Error(http.StatusBadRequest, "invalid JSON: "+err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return v, Error(http.StatusBadRequest, "invalid JSON: more than one value")
	}
	return v, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler[Req, Resp]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, err := h.Decode(r)
	if err != nil {
		var se *StatusError
		if !errors.As(err, &se) {
			err = &StatusError{Code: http.StatusBadRequest, Message: err.Error()}
		}
		h.writeError(w, r, err)
		return
	}
	ctx := r.Context()
	if h.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.Timeout)
		defer cancel()
	}
	resp, err := stage.Call[Req, Resp](ctx, h.Sink, req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if h.Encode != nil {
		if err := h.Encode(w, resp); err != nil && h.Logger != nil {
			h.Logger.Debug("nethttp: encode failed", "path", r.URL.Path, "err", err)
		}
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *Handler[Req, Resp]) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := writeError(w, err, stageName(h.Sink), h.RetryAfter)
	if h.Logger != nil {
		h.Logger.Debug("nethttp: request failed", "path", r.URL.Path, "status", code, "err", err)
	}
}

// writeError writes err's status (StatusOf) with a JSON body
// {"error": message}; internal errors are not disclosed.
func writeError(w http.ResponseWriter, err error, front string, retryAfter time.Duration) int {
	code := StatusOf(err, front)
	if code == StatusClientClosed {
		return code
	}
	msg := http.StatusText(code)
	var se *StatusError
	if errors.As(err, &se) && se.Message != "" {
		msg = se.Message
	}
	if code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", retryAfterSeconds(retryAfter))
	}
	writeJSON(w, code, struct {
		Error string `json:"error"`
	}{msg})
	return code
}

func retryAfterSeconds(d time.Duration) string {
	if d <= 0 {
		d = time.Second
	}
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// stageName is the name of the stage behind s, if s is a stage's sink.
func stageName(s sink.Sink) string {
	if st, ok := s.(fmt.Stringer); ok {
		const prefix = "stage "
		if n := st.String(); len(n) > len(prefix) && n[:len(prefix)] == prefix {
			return n[len(prefix):]
		}
	}
	return ""
}

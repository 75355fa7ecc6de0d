// Package nethttp puts Sandstorm stages behind a standard net/http server.
//
// Start with JSON: it returns an http.Handler that decodes a JSON request
// body into Req, calls the stage (stage.Call) with the request's context
// and writes the stage's Resp as JSON:
//
//	mux.Handle("POST /orders", nethttp.JSON[Order, Receipt](validate.Sink()))
//
// The stage's admission predicate is the server's admission control, and
// outcomes map to status codes as StatusOf says: a rejected request gets
// 503 Service Unavailable with Retry-After at once (no work done, nothing
// queued), a request past Handler.Timeout gets 504 Gateway Timeout, a
// stage's failure 500 (502 Bad Gateway when a stage behind the first one
// failed), and a handler can answer with any status through Error. A
// client that disconnects while its request is queued costs nothing more:
// the runtime drops requests whose context has ended (stage.ContextEvent).
//
// Handler is the general form (own decoding and encoding). Middleware
// admits requests for an existing http.Handler through a stage and runs
// that handler on the stage's goroutines (register Serve as the stage's
// handler), so the stage's pool bounds concurrency and its predicate sheds
// load in front of code that knows nothing of stages.
//
// This package adapts net/http; Haboob's own HTTP stack (package http, on
// aio) is separate and does not use it.
package nethttp

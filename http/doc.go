// Package http is the HTTP/1.1 and HTTP/2 protocol library of Sandstorm (thesis
// chapter 5 §7): the pure, I/O-free core that a server stage on the aio
// socket layer drives.
//
// This package is Haboob's own HTTP stack on the aio layer. To put stages
// behind a standard net/http server, use package nethttp instead. Start
// here with Listen (a server that enqueues each parsed Request on a
// stage's sink); a stage answers on the request's Connection with Send.
//
// The same server speaks HTTP/2 (RFC 9113): chosen by ALPN on a TLS
// listener, or by the client preface on a plain one (h2c with prior
// knowledge). Each stream's request is a Request event like an HTTP/1.1
// one, answered the same way; [H2Config] bounds what a connection may do
// (streams, header lists, CONTINUATION frames, resets and control frames
// per second). See docs/http2.md.
//
// # Parsing
//
// A [Parser] is the per-connection state machine (Sandstorm's
// httpPacketReader). The server feeds it every packet read from the
// connection, split anywhere, and gets back the requests completed by that
// packet, several at once when the client pipelines:
//
//	reqs, err := conn.parser.Feed(reqs[:0], packet)
//	for _, r := range reqs { /* enqueue r to the application stage */ }
//	if err != nil { /* send ErrorResponse(err), then close */ }
//
// It handles HTTP/1.0 and 1.1, keep-alive and "Connection: close",
// Content-Length and chunked bodies (with extensions and trailers),
// "Expect: 100-continue" ([Parser.TakeContinue]) and size [Limits]. Bad
// input fails the parser with an [*Error] that carries the status to answer
// (400, 413, 414, 431, 501 or 505) and wraps a sentinel such as
// [ErrFraming]; nothing panics. The parser is stricter than net/http where
// RFC 9112 allows a server to be, to rule out request smuggling: it rejects
// obsolete line folding, whitespace before a field's colon, requests with
// both Content-Length and Transfer-Encoding, Transfer-Encoding in HTTP/1.0,
// and HTTP/1.1 requests without exactly one valid Host. Otherwise it
// accepts what net/http.ReadRequest accepts and agrees with it; FuzzParser
// checks this.
//
// A [Request] is plain data owned by itself: the header section is copied
// once per request and all its strings share that copy; the body is copied
// into Request.Body. Request.Conn and Request.Seq let a server send the
// responses to pipelined requests back in order; Request.Class() (from the
// X-Class header by default) and Request.Principal() feed admission control.
// A server with a [ClientPolicy] (ServerConfig.Clients) gives every request
// its client's IP address as principal (the peer's, or the client a
// trusted proxy names in X-Forwarded-For, X-Real-IP or Forwarded) and
// believes the class header only from trusted proxies; without one there
// is no principal and any client may claim a class.
//
// # Responses
//
// A [Response] holds a status, header fields and a body, in memory or sent
// by the caller (a file, see [NewFileResponse]). Constructors cover the
// usual kinds: [OK], [NotFound], [BadRequest], [Forbidden], [Redirect],
// [ServiceUnavailable] (with Retry-After, the answer to an admission
// rejection), [InternalServerError], [NotModified], [PartialContent],
// [StatusResponse] and the general [NewResponse]. A [Formatter] appends the
// bytes to send: status line, Date (cached per second), Server,
// Content-Length and Connection as the request's version and the
// response require, CRLF line ends, no body for HEAD.
//
// # Server
//
// [Listen] starts a [Server] (Sandstorm's httpServer stage) on an aio server
// socket. Each accepted connection gets a [Connection] and its own Parser;
// parsing runs inline where the socket layer delivers the packets (it is
// short and never blocks, so it costs no extra stage hop), and every
// completed request is enqueued on the application's sink, typically a
// stage's. The application answers by enqueuing a [Reply] on the request's
// Connection (or calling [Respond]); the Connection formats the header with
// the server's shared Formatter and sends the responses to pipelined
// requests in request order, copying small bodies into the header's buffer
// and sending large ones (a cached page, a file) from their own buffers,
// header and body in one writev. It closes after a response that does not
// keep the connection alive.
//
// A Connection is a parser plus a sequencer of pipelined replies, nothing
// more: the output belongs to the [aio.Connection] underneath, which holds
// the write window, the completions, the closing state, the write timeout
// and the socket-wide output budget. There is one output queue per
// connection, the aio one: each reply is written into it with
// [aio.Connection.Write] as its turn comes, in order (the Connection's
// lock, then aio's leaf lock); the server's timeouts run on the socket's maintenance
// goroutine ([aio.Connection.SetTimer]): the server has no goroutine of
// its own. A body too large to hold in memory
// is sent as a [Stream]: the application writes it piece by piece, each
// piece's completion asking for the next, so a response holds a bounded
// number of pieces however long it is.
//
// Overload and misbehaving clients never hang a connection: a request the
// application's sink rejects is answered at once with 503 and Retry-After;
// connections beyond MaxConnections get 503 and are closed; malformed input
// gets the parser's status and a clean close; a request that does not
// arrive within RequestTimeout gets 408 (slowloris), an idle keep-alive
// connection is closed after IdleTimeout, a client that stops reading is
// dropped after WriteTimeout, and a request the application never answers
// gets 503 after ResponseTimeout. A client that pipelines more than
// MaxBuffered unparsed bytes is not read until replies make room (TCP flow
// control holds it back). Request bodies share the server's BodyBudget
// (503 beyond a connection's fair share); bodies the application will not
// read (ServerConfig.SkipBody: a static file) are never buffered and get
// the final status instead of 100 Continue. CONNECT gets 400 and a close.
// A connection closed with input left unread (after 400, 405, 408, 413 or
// 431) lingers (RFC 9112 §9.6, [aio.Connection.Linger]): FIN after the
// last response, input discarded until the client closes or LingerTimeout,
// so that a reset does not destroy the responses the client has not read. A request that a later stage refuses is
// answered with [Connection.Reject] (503, counted like the server's own
// rejections). Pipelining is bounded by MaxPipeline unanswered requests per
// connection. Shutdown drains like net/http.Server.Shutdown: no more
// requests are read, connections owing no response (idle, or with a request
// only partly received) close at once, the others after their responses;
// after ShutdownGrace (or near the context's deadline) the connections
// still stuck behind a client that does not read are aborted and counted
// rather than failing the shutdown. With a Manager the server drains as soon as the manager starts
// shutting down. ServerStats counts everything and is published as
// go-metrics gauges "http.<name>.<counter>".
package http

package http

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Server defaults, used for the zero fields of ServerConfig.
const (
	DefaultRequestTimeout  = 20 * time.Second
	DefaultIdleTimeout     = 60 * time.Second
	DefaultWriteTimeout    = 60 * time.Second
	DefaultResponseTimeout = 60 * time.Second
	DefaultRetryAfter      = time.Second
	DefaultMaxPipeline     = 32
	DefaultMaxBuffered     = 1 << 20
	DefaultWriteWindow     = 256 << 10
	DefaultInlineBody      = 16 << 10
	DefaultBodyBudget      = 64 << 20
)

// minBodyShare is the body a connection may always buffer, whatever the
// server's BodyBudget, so that every client can send a small form.
const minBodyShare = 64 << 10

// Server errors.
var (
	// ErrServerClosed: the server was shut down.
	ErrServerClosed = errors.New("http: server closed")
	// ErrBadReply: a Reply a Connection cannot send: no request or
	// response, a request of another connection, a request already
	// answered, or a body whose length is not the response's
	// ContentLength.
	ErrBadReply = errors.New("http: bad reply")
	// ErrNoConnection: Respond was given a request whose Conn is not an
	// *http.Connection.
	ErrNoConnection = errors.New("http: request has no connection")
)

// ServerConfig configures a Server. Zero fields take defaults; a negative
// timeout means none.
type ServerConfig struct {
	// Socket is the listening socket (Addr, event loops, write threshold,
	// ...). Its Name defaults to the field below.
	Socket aio.SocketConfig
	// Name names the server in metrics ("http.<name>.<counter>") and logs
	// (default "http").
	Name string
	// Limits bound what the parser accepts (see Limits).
	Limits Limits
	// ClassHeader names the header that gives Request.Class() (default
	// X-Class).
	ClassHeader string
	// ServerHeader is the Server field of responses (default Sandstorm).
	ServerHeader string
	// MaxConnections bounds the open connections (0: unbounded). A
	// connection beyond it has its first request answered with 503 and
	// Retry-After, then is closed.
	MaxConnections int
	// RequestTimeout bounds how long a request may take to arrive once its
	// first byte did (slow clients, slowloris); it is answered with 408 and
	// the connection closed.
	RequestTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that has nothing to do:
	// no request arriving, none being served.
	IdleTimeout time.Duration
	// WriteTimeout aborts a connection whose written responses make no
	// progress toward the client for this long (a peer that stopped
	// reading). It is the socket's WriteTimeout (Socket.WriteTimeout, if
	// set, wins): the aio connection owns the output.
	WriteTimeout time.Duration
	// ResponseTimeout bounds how long the application may take to answer
	// a request; past it the request gets 503 and the connection is closed,
	// so that a lost event never hangs a client. Only the time the
	// connection has nothing else to write counts: an application may
	// hold an answer until the client has taken the earlier ones.
	ResponseTimeout time.Duration
	// RetryAfter is the Retry-After of the 503 sent when the application's
	// sink rejects a request (default 1s).
	RetryAfter time.Duration
	// MaxPipeline bounds the requests of one connection handed to the
	// application and not yet answered; further pipelined requests wait,
	// unparsed, until earlier ones are answered (default 32).
	MaxPipeline int
	// MaxBuffered bounds the received bytes a connection holds unparsed
	// while its pipeline is full; beyond it the connection stops reading
	// (TCP flow control holds the client back) until replies make room
	// (default 1 MiB).
	MaxBuffered int
	// WriteWindow is the socket's WriteWindow when Socket.WriteWindow is
	// not set: the bytes of one connection handed to the kernel path and
	// not yet written; later bytes wait by reference in the aio connection
	// (default 256 KiB).
	WriteWindow int
	// BodyBudget bounds the request-body bytes buffered by all the
	// server's connections together (bodies being received and bodies of
	// requests not answered yet; default 64 MiB, < 0: unbounded). A body
	// that does not fit (beyond its connection's fair share, the budget
	// divided by the open connections, at least 64 KiB) is answered 503
	// with Retry-After and its connection closed. Limits.MaxBody bounds
	// each body.
	BodyBudget int64
	// SkipBody, if set, says from a request's header alone that the
	// application will not read its body (a static file server): the
	// request is delivered without its body, nothing of the body is
	// buffered, a client that sent "Expect: 100-continue" gets the final
	// status instead of 100 Continue, and the connection is closed after
	// the response, the body's bytes discarded by a lingering close.
	SkipBody func(*Request) bool
	// InlineBody is the largest body copied into the response's header
	// buffer (one write, the body released at once); larger bodies are sent
	// from their own buffers (default 16 KiB).
	InlineBody int
	// Clients, if set, says who each request's client is and whose class
	// header counts (see ClientPolicy): every request gets its client's
	// address as its principal (Request.Principal), and the class header
	// is honoured only as the policy says (by default, only from trusted
	// proxies). Nil keeps the behaviour of servers before it: no
	// principal, and any client may claim a class.
	Clients *ClientPolicy
	// Principal, if set, is called for every parsed request to attach
	// the request's principal (Request.Principal) before it is handed to
	// the application. It runs after Clients has set the client's
	// address as principal, which it may read (Request.PrincipalValue)
	// and replace (a logged-in user, say).
	Principal func(*Request) any
	// Inline, if set, is offered every parsed request before it is
	// enqueued on the application's sink, on the goroutine that parsed it
	// (the socket's event loop): it returns true if it has answered the
	// request (Connection.Send or Respond), and then the request is not
	// enqueued. It must not block: the connection's reading, and the
	// event loop's other connections, wait for it. Requests it answers
	// count in ServerStats.Requests like the others.
	Inline func(*Request) bool
	// RecycleInline says that the Inline hook, and whatever it hands the
	// request's answer to, keep nothing of a request it answered (the
	// *Request, its strings, Header or Body) once the answer is sent:
	// the request's memory is then recycled (when no OnResponse,
	// admission predicate or context could still see it), so that an
	// inline answer allocates no Request. The memory is shared by the
	// event loop, not kept by the connection: the next request parsed on
	// ANY connection of the same event loop may reuse it, possibly at
	// once (the very next request the loop parses). A hook that keeps a
	// reference (or hands one to another goroutine) then sees another
	// connection's request overwrite it: it breaks other clients'
	// requests, not only its own connection's. Copy what must outlive
	// the answer, including a reply body made of the request's bytes:
	// the body may still wait in the connection's outbox when the next
	// request reuses them.
	RecycleInline bool
	// OnResponse, if set, is called once for every response the server
	// hands to the socket: the application's answers, 503 rejections, and
	// the server's own answers to requests that failed to parse or timed
	// out (Method, Target and Proto then empty). It is the access log's
	// source (package http/accesslog). It runs on the answering goroutine
	// with the connection's lock held: it must not block and must not call
	// the Connection; copy what it keeps (the record's strings are the
	// request's and stay valid).
	OnResponse func(AccessRecord)

	// HTTP2 configures HTTP/2 (h2.go): on by default, by ALPN on a TLS
	// listener and with prior knowledge on a plain one.
	HTTP2 H2Config

	// TimerInterval is how often timeouts are checked (0: a quarter of the
	// smallest timeout, within 5ms..1s).
	// ShutdownGrace is how long Shutdown lets connections finish their
	// responses before aborting the ones that have not (clients that do
	// not read). 0: until the last tenth of the time its context leaves
	// (at most ForceCloseMargin before the deadline), or never without a
	// deadline.
	ShutdownGrace time.Duration
	// Timeouts are checked on the socket's maintenance goroutine
	// (aio.Connection.SetTimer): the server has no goroutine of its own.
	TimerInterval time.Duration
}

func (c ServerConfig) withDefaults() ServerConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.RequestTimeout, DefaultRequestTimeout)
	def(&c.IdleTimeout, DefaultIdleTimeout)
	def(&c.WriteTimeout, DefaultWriteTimeout)
	def(&c.ResponseTimeout, DefaultResponseTimeout)
	def(&c.RetryAfter, DefaultRetryAfter)
	if c.Name == "" {
		c.Name = "http"
	}
	if c.MaxPipeline <= 0 {
		c.MaxPipeline = DefaultMaxPipeline
	}
	if c.MaxBuffered <= 0 {
		c.MaxBuffered = DefaultMaxBuffered
	}
	if c.WriteWindow <= 0 {
		c.WriteWindow = DefaultWriteWindow
	}
	if c.BodyBudget == 0 {
		c.BodyBudget = DefaultBodyBudget
	}
	if c.Socket.WriteWindow == 0 {
		c.Socket.WriteWindow = aio.ByteSize(c.WriteWindow)
	}
	if c.Socket.WriteTimeout == 0 && c.WriteTimeout > 0 {
		c.Socket.WriteTimeout = c.WriteTimeout
	}
	if c.InlineBody == 0 {
		c.InlineBody = DefaultInlineBody
	}
	if c.TimerInterval <= 0 {
		smallest := time.Second * 4
		for _, d := range []time.Duration{c.RequestTimeout, c.IdleTimeout, c.WriteTimeout, c.ResponseTimeout} {
			if d > 0 && d < smallest {
				smallest = d
			}
		}
		c.TimerInterval = min(max(smallest/4, 5*time.Millisecond), time.Second)
	}
	if c.Socket.Name == "" {
		c.Socket.Name = c.Name
	}
	c.HTTP2 = c.HTTP2.withDefaults()
	c.Socket.TLS = h2TLS(c)
	return c
}

// ServerStats are a server's counters; all but Open are cumulative.
type ServerStats struct {
	Open      int    // connections open now (within MaxConnections)
	Accepted  uint64 // connections accepted
	OverLimit uint64 // connections beyond MaxConnections, answered 503
	Requests  uint64 // requests parsed and handed to the application
	// Rejected counts requests the application's sink refused; each was
	// answered 503 with Retry-After.
	Rejected  uint64
	Responses uint64 // responses handed to the socket (interim ones excluded)
	// ByClass counts responses by status class: ByClass[2] is 2xx, ...
	ByClass          [6]uint64
	ParseErrors      uint64 // malformed or oversized requests (4xx/5xx, then close)
	RequestTimeouts  uint64 // requests that did not arrive within RequestTimeout (408)
	ResponseTimeouts uint64 // requests the application did not answer in time (503)
	IdleClosed       uint64 // keep-alive connections closed by IdleTimeout
	WriteTimeouts    uint64 // connections aborted by WriteTimeout
	Overflows        uint64 // packets refused (reading paused) because MaxBuffered bytes waited unparsed
	BodyRejected     uint64 // request bodies refused (503) for lack of BodyBudget
	Continues        uint64 // 100 Continue interim responses sent
	Dropped          uint64 // replies not sent: their connection closed first
	// ForceClosed counts connections Shutdown aborted near its deadline
	// because their responses could not be sent (a client not reading).
	ForceClosed uint64
	// HTTP2 are the HTTP/2 counters (streams, refusals, bounds exceeded).
	HTTP2 H2Stats
}

type serverCounters struct {
	accepted, overLimit, requests, rejected, responses         atomic.Uint64
	byClass                                                    [6]atomic.Uint64
	parseErrors, requestTimeouts, responseTimeouts, idleClosed atomic.Uint64
	writeTimeouts, overflows, continues, dropped, forceClosed  atomic.Uint64
	bodyRejected                                               atomic.Uint64
	bodyBytes                                                  atomic.Int64 // request bodies buffered, against BodyBudget
	h2                                                         h2Counters
}

// Server is an HTTP/1.1 server on an aio server socket (Sandstorm's
// httpServer, thesis §5.7). Every connection gets a Parser; the requests it
// completes are enqueued on the application's sink as *Request events whose
// Conn is the *Connection to answer on. The application sends a Reply
// (or calls Respond) and the connection sends the responses in request
// order, closing after "Connection: close", an error, or a timeout.
//
// A request the application's sink rejects is answered at once with 503
// and Retry-After: overload never hangs a client.
type Server struct {
	cfg      ServerConfig
	env      aio.Env // defaults applied
	requests sink.Sink
	sock     *aio.Server
	log      *slog.Logger
	format   Formatter

	mu     sync.Mutex
	conns  map[*Connection]struct{}
	open   int // connections within MaxConnections
	closed bool

	draining atomic.Bool
	nextID   atomic.Uint64
	stats    serverCounters

	unsub       func()
	metricNames []string
	closeOnce   sync.Once
}

// Listen starts an HTTP server on cfg.Socket.Addr that enqueues the
// requests it parses on requests. It returns once the socket listens.
// env is what the server and its socket are plugged into (the zero Env
// will do): with a Manager, the server's counters go to its metrics
// registry (unless env.Metrics names another) and the server starts
// draining (responses close their connections, idle connections are
// closed) when the manager raises stage.SignalShutdownStarted; the logger
// is env.Logger, else the Manager's, else none.
func Listen(cfg ServerConfig, requests sink.Sink, env aio.Env) (*Server, error) {
	if requests == nil {
		return nil, fmt.Errorf("http: Listen with a nil request sink")
	}
	cfg = cfg.withDefaults()
	if cfg.Clients != nil {
		if err := cfg.Clients.Validate(); err != nil {
			return nil, err
		}
		cp := cfg.Clients.withDefaults()
		cfg.Clients = &cp
	}
	if env.Metrics == nil && env.Manager != nil {
		env.Metrics = env.Manager.Metrics()
	}
	if env.Logger == nil && env.Manager != nil {
		env.Logger = env.Manager.Logger()
	}
	if env.Logger == nil {
		env.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:      cfg,
		env:      env,
		requests: requests,
		log:      env.Logger.With("server", cfg.Name),
		conns:    map[*Connection]struct{}{},
	}
	s.format.Server = cfg.ServerHeader
	sock, err := aio.Listen(cfg.Socket, aio.Func(s.onAcceptEvent), env)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	s.sock = sock
	s.registerMetrics()
	if env.Manager != nil {
		s.unsub = env.Manager.Subscribe(stage.SignalShutdownStarted, signalSink{name: cfg.Name + ".signal", f: s.Drain})
	}
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.sock.Addr() }

// Socket returns the underlying aio server socket.
func (s *Server) Socket() *aio.Server { return s.sock }

// Config returns the server's configuration, defaults applied.
func (s *Server) Config() ServerConfig { return s.cfg }

// Formatter returns the server's shared response formatter.
func (s *Server) Formatter() *Formatter { return &s.format }

// Drain makes the server wind down gracefully without closing it: it
// stops accepting and reading requests, every later response closes its
// connection, and connections that owe no response (idle ones, and ones
// with a request only partly received) are closed at once. Shutdown
// drains; a server created with a Manager drains when the manager starts
// shutting down.
func (s *Server) Drain() {
	if s.draining.CompareAndSwap(false, true) {
		s.sock.SuspendAccept()
		for _, c := range s.snapshot() {
			c.drainAny()
		}
	}
}

// Draining reports whether Drain was called.
func (s *Server) Draining() bool { return s.draining.Load() }

// Shutdown stops the server gracefully, like net/http.Server.Shutdown: it
// drains (see Drain: no more requests are read, connections that owe no
// response close at once), lets every connection finish the responses to
// the requests it has received (each closes its connection), and waits
// until all are closed; then it closes the socket.
//
// A connection can only finish if its client reads. After ShutdownGrace,
// or else when ctx has a deadline, the connections still open in the last
// tenth of the time left (at most the last ForceCloseMargin), are aborted, counted in
// ServerStats.ForceClosed and logged, so that a client that stopped
// reading does not make the whole shutdown fail. If ctx ends before every
// connection is gone, the rest are closed at once and ctx's error is
// returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.Drain()
	var force <-chan time.Time
	if g := s.cfg.ShutdownGrace; g > 0 {
		ft := time.NewTimer(g)
		defer ft.Stop()
		force = ft.C
	} else if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		ft := time.NewTimer(left - min(left/10, ForceCloseMargin))
		defer ft.Stop()
		force = ft.C
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		conns := s.snapshot()
		for _, c := range conns {
			c.drainAny()
		}
		if len(conns) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			err := s.Close()
			return fmt.Errorf("http: shutdown of %s: %w", s.cfg.Name, errors.Join(ctx.Err(), err))
		case <-force:
			force = nil
			s.stats.forceClosed.Add(uint64(len(conns)))
			s.log.Warn("http: shutdown: closing connections that did not finish their responses",
				"count", len(conns))
			for _, c := range conns {
				_ = c.Abort()
			}
		case <-t.C:
		}
	}
	err := s.sock.Shutdown(ctx)
	s.finish()
	return err
}

// ForceCloseMargin bounds how long before its context's deadline Shutdown
// aborts the connections that have not finished (see Shutdown).
const ForceCloseMargin = time.Second

// Close closes the server and every connection now.
func (s *Server) Close() error {
	s.Drain()
	err := s.sock.Close()
	s.finish()
	return err
}

func (s *Server) finish() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		if s.unsub != nil {
			s.unsub()
		}
		s.unregisterMetrics()
	})
}

func (s *Server) snapshot() []*Connection {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Connection, 0, len(s.conns))
	for c := range s.conns {
		out = append(out, c)
	}
	return out
}

// Connections returns the open connections.
func (s *Server) Connections() []*Connection { return s.snapshot() }

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	open := s.open
	s.mu.Unlock()
	c := &s.stats
	st := ServerStats{
		Open:             open,
		Accepted:         c.accepted.Load(),
		OverLimit:        c.overLimit.Load(),
		Requests:         c.requests.Load(),
		Rejected:         c.rejected.Load(),
		Responses:        c.responses.Load(),
		ParseErrors:      c.parseErrors.Load(),
		RequestTimeouts:  c.requestTimeouts.Load(),
		ResponseTimeouts: c.responseTimeouts.Load(),
		IdleClosed:       c.idleClosed.Load(),
		WriteTimeouts:    c.writeTimeouts.Load(),
		Overflows:        c.overflows.Load(),
		Continues:        c.continues.Load(),
		Dropped:          c.dropped.Load(),
		ForceClosed:      c.forceClosed.Load(),
		BodyRejected:     c.bodyRejected.Load(),
		HTTP2:            c.h2.stats(),
	}
	for i := range st.ByClass {
		st.ByClass[i] = c.byClass[i].Load()
	}
	return st
}

// ---- socket events ----

func (s *Server) onAcceptEvent(e sink.Event) error {
	switch ev := e.(type) {
	case *aio.Connection:
		s.accept(ev)
	case aio.SinkClosed:
		// A connection that closed before its reader started.
		if c, ok := ev.Conn.Value().(*Connection); ok {
			c.onClosedAny(ev)
		}
	}
	return nil // ListenSucceeded, ServerClosed: nothing to do
}

func (s *Server) accept(sock *aio.Connection) {
	c := newConnection(s, sock)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = sock.Abort()
		return
	}
	if s.cfg.MaxConnections > 0 && s.open >= s.cfg.MaxConnections {
		c.overLimit = true
		s.stats.overLimit.Add(1)
	} else {
		s.open++
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	s.stats.accepted.Add(1)
	sock.SetValue(c)
	c.armTimer()
	if err := sock.StartReader(connReader{c}); err != nil {
		s.log.Error("http: cannot read connection", "conn", sock.String(), "err", err)
		_ = sock.Abort()
		return
	}
	if s.draining.Load() {
		c.drainAny() // accepted as the server started draining
	}
}

func (s *Server) remove(c *Connection) {
	s.mu.Lock()
	if _, ok := s.conns[c]; ok {
		delete(s.conns, c)
		if !c.overLimit {
			s.open--
		}
	}
	s.mu.Unlock()
}

// connReader is the reader of one of a Server's sockets: packets are
// handed to it by value (aio.PacketReceiver), the rest as events. It
// carries its Connection, so that a packet reaches it without the
// socket's Value (two more cache lines per request at 1024 connections:
// the field and the boxed value).
type connReader struct{ c *Connection }

func (r connReader) Enqueue(e sink.Event) error { return r.c.onReaderEvent(e) }

func (r connReader) ReceivePacket(p aio.Packet) error {
	return r.c.onPacket(p.Data, p.At, false)
}

// BorrowPacket takes a packet whose bytes are lent by the event loop
// (aio.PacketBorrower): parsed at once, they are copied only when they
// must wait (see onPacket).
func (r connReader) BorrowPacket(p aio.Packet) error {
	return r.c.onPacket(p.Data, p.At, true)
}

func (c *Connection) onReaderEvent(e sink.Event) error {
	switch ev := e.(type) {
	case aio.Packet:
		return c.onPacket(ev.Data, ev.At, false)
	case aio.TimerExpired:
		c.onTimerAny()
	case aio.SinkClosed:
		c.onClosedAny(ev)
	}
	return nil
}

// ---- metrics ----

func (s *Server) registerMetrics() {
	reg := s.env.Metrics
	if reg == nil {
		return
	}
	c := &s.stats
	gauge := func(name string, f func() int64) {
		full := "http." + s.cfg.Name + "." + name
		reg.Unregister(full)
		if err := reg.Register(full, metrics.NewFunctionalGauge(f)); err == nil {
			s.metricNames = append(s.metricNames, full)
		}
	}
	u := func(a *atomic.Uint64) func() int64 { return func() int64 { return int64(a.Load()) } }
	gauge("connections.open", func() int64 { return int64(s.Stats().Open) })
	gauge("connections.accepted", u(&c.accepted))
	gauge("connections.overLimit", u(&c.overLimit))
	gauge("requests", u(&c.requests))
	gauge("requests.rejected", u(&c.rejected))
	gauge("responses", u(&c.responses))
	for i := 1; i < len(c.byClass); i++ {
		gauge(fmt.Sprintf("responses.%dxx", i), u(&c.byClass[i]))
	}
	gauge("errors.parse", u(&c.parseErrors))
	gauge("timeouts.request", u(&c.requestTimeouts))
	gauge("timeouts.response", u(&c.responseTimeouts))
	gauge("timeouts.write", u(&c.writeTimeouts))
	gauge("closed.idle", u(&c.idleClosed))
	gauge("closed.overflow", u(&c.overflows))
	gauge("continues", u(&c.continues))
	gauge("replies.dropped", u(&c.dropped))
	gauge("closed.forced", u(&c.forceClosed))
	s.registerH2Metrics(gauge)
}

func (s *Server) unregisterMetrics() {
	for _, n := range s.metricNames {
		s.env.Metrics.Unregister(n)
	}
	s.metricNames = nil
}

// signalSink receives the manager's shutdown signal: stage.Manager's
// Subscribe takes a sink.Sink. It exists only for that API.
type signalSink struct {
	name string
	f    func()
}

func (f signalSink) Enqueue(sink.Event) error { f.f(); return nil }
func (f signalSink) EnqueueMany([]sink.Event) error {
	f.f()
	return nil
}
func (f signalSink) EnqueueLossy(sink.Event) bool { f.f(); return true }
func (f signalSink) Prepare([]sink.Event) (sink.Txn, error) {
	return nil, &sink.RejectError{Sink: f.name, Reason: "no transactions"}
}
func (f signalSink) Len() int                    { return 0 }
func (f signalSink) SetPredicate(sink.Predicate) {}
func (f signalSink) Predicate() sink.Predicate   { return nil }

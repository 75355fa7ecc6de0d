package aio

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Server is a listening socket (Sandstorm's asyncServerSocket). Its sink
// receives ListenSucceeded, then one *Connection per accepted connection,
// and ServerClosed at the end.
//
// The server owns a gnet engine (its event loops) and a maintenance
// goroutine; Close or Shutdown stops and waits for all of them.
type Server struct {
	eng     *engine
	sink    Receiver
	addr    net.Addr
	gnetEng gnet.Engine

	suspended atomic.Bool
	reported  atomic.Bool // ServerClosed delivered
	booted    chan struct{}
	runDone   chan struct{}
	runErr    error
	unsub     func()

	closeMu sync.Mutex
	closed  bool
}

// Listen starts a server socket on cfg.Addr. It returns once the socket
// listens (or failed to: the error is also delivered to s as ListenFailed).
// Connections are delivered to s as *Connection events; if s rejects one,
// that connection is closed at once (admission control at accept).
func Listen(cfg SocketConfig, s Receiver) (*Server, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: Listen with a nil sink", ErrInvalidConfig)
	}
	fail := func(err error) (*Server, error) {
		_ = s.Enqueue(ListenFailed{Addr: cfg.Addr, Err: err})
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return fail(err)
	}
	url, _, _, err := splitAddr(cfg.Addr)
	if err != nil {
		return fail(err)
	}
	cfg = cfg.withDefaults()
	name := cfg.Name
	if name == "" {
		name = defaultName("server", cfg.Addr)
	}
	srv := &Server{sink: s, booted: make(chan struct{}), runDone: make(chan struct{})}
	e := newEngine(cfg, name)
	e.server = srv
	srv.eng = e
	e.start()
	go func() {
		err := gnet.Run(e, url, e.gnetOptions()...)
		srv.runErr = err
		srv.stoppedByItself(err)
		close(srv.runDone)
	}()
	select {
	case <-srv.booted:
	case <-srv.runDone:
		err := srv.runErr
		if err == nil {
			err = ErrSocketClosed
		}
		err = fmt.Errorf("aio: listen on %s: %w", cfg.Addr, err)
		srv.reported.Store(true)
		e.setClosing()
		e.finish(ListenFailed{Addr: cfg.Addr, Err: err}, s)
		return nil, err
	}
	if cfg.Manager != nil {
		srv.unsub = cfg.Manager.Subscribe(stage.SignalShutdownStarted, signalSink(func(sink.Event) { srv.SuspendAccept() }))
	}
	return srv, nil
}

// OnBoot runs in gnet.Run before the event loops start: the socket is
// bound, so ListenSucceeded precedes every Connection.
func (e *engine) OnBoot(eng gnet.Engine) gnet.Action {
	if s := e.server; s != nil {
		s.gnetEng = eng
		s.addr = boundAddr(eng)
		e.box.send(delivery{to: s.sink, ev: ListenSucceeded{Server: s, Addr: s.addr}})
		close(s.booted)
	}
	return gnet.None
}

// stoppedByItself reports an engine that stopped without Close (an accept
// error stops a gnet engine).
func (s *Server) stoppedByItself(err error) {
	if s.eng.isClosing() {
		return
	}
	select {
	case <-s.booted:
	default:
		return // Listen reports it
	}
	if err == nil {
		err = ErrSocketClosed
	}
	s.eng.log.Error("aio: server stopped unexpectedly", "err", err)
	if s.reported.CompareAndSwap(false, true) {
		s.eng.box.send(delivery{to: s.sink, ev: ServerClosed{Server: s, Err: err}})
	}
}

func (s *Server) box() *outbox { return &s.eng.box }

// boundAddr asks the kernel which address the listener got (for port 0).
func boundAddr(eng gnet.Engine) net.Addr {
	fd, err := eng.Dup()
	if err != nil {
		return nil
	}
	defer syscall.Close(fd)
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return nil
	}
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(append([]byte(nil), a.Addr[:]...)), Port: a.Port}
	case *syscall.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(append([]byte(nil), a.Addr[:]...)), Port: a.Port}
	case *syscall.SockaddrUnix:
		return &net.UnixAddr{Name: a.Name, Net: "unix"}
	}
	return nil
}

// Addr is the address the server listens on (with the real port when the
// configured port was 0).
func (s *Server) Addr() net.Addr { return s.addr }

// Name is the socket's name in metrics and logs.
func (s *Server) Name() string { return s.eng.name }

// MetricsPrefix is the prefix of the socket's metrics: "aio.<Name>", or
// "aio.<Name>-2" (-3 …) if another socket of that name had registered its
// metrics in the same registry first; "" without a registry.
func (s *Server) MetricsPrefix() string { return s.eng.metricPrefix }

// Stats returns the socket's counters.
func (s *Server) Stats() SocketStats { return s.eng.snapshotStats() }

// SuspendAccept stops handing out new connections. gnet cannot pause
// accept(2), so while suspended, connections the kernel completes are
// accepted and closed at once (counted in RejectedAccepts); the listening
// socket stays open and existing connections are not affected. A server
// created with a Manager suspends itself when the manager raises
// stage.SignalShutdownStarted.
func (s *Server) SuspendAccept() { s.suspended.Store(true) }

// ResumeAccept undoes SuspendAccept.
func (s *Server) ResumeAccept() { s.suspended.Store(false) }

// Suspended reports whether accepting is suspended.
func (s *Server) Suspended() bool { return s.suspended.Load() }

// Connections returns the open connections.
func (s *Server) Connections() []*Connection { return s.eng.snapshot() }

// Close stops the server now: the listener and every connection are closed
// (unsent output is dropped and reported in SinkClosed), the event loops
// and the maintenance goroutine are waited for, and ServerClosed is
// delivered. Close is idempotent. It waits for the event loops, so it must
// not be called from a sink's Enqueue running on one (an inline reader).
func (s *Server) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.closeMu.Unlock()
	if s.unsub != nil {
		s.unsub()
	}
	s.eng.setClosing()
	select {
	case <-s.runDone:
	default:
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // trigger the engine's shutdown; runDone says when it is over
		_ = s.gnetEng.Stop(ctx)
		<-s.runDone
	}
	var last sink.Event
	if s.reported.CompareAndSwap(false, true) {
		last = ServerClosed{Server: s}
	}
	s.eng.finish(last, s.sink)
	return nil
}

// Shutdown stops the server gracefully, like http.Server.Shutdown: it stops
// accepting, closes every connection after its queued output (see
// Connection.Close), waits until they are closed and their events
// delivered, then Closes. If ctx ends first, it Closes at once and returns
// ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.SuspendAccept()
	return shutdown(ctx, s.eng, func() bool { return false }, s.Close)
}

// shutdown closes every connection gracefully (including ones that open
// meanwhile) and waits until none is open, no delivery is pending and busy
// is false; then it calls closeNow.
func shutdown(ctx context.Context, e *engine, busy func() bool, closeNow func() error) error {
	t := time.NewTicker(max(e.cfg.PollInterval, time.Millisecond))
	defer t.Stop()
	for {
		conns := e.snapshot()
		for _, c := range conns {
			_ = c.Close()
		}
		if len(conns) == 0 && !busy() && !e.watching() && !e.boxWait.Load() {
			break
		}
		select {
		case <-ctx.Done():
			err := closeNow()
			return fmt.Errorf("aio: shutdown of %s: %w", e.name, joinErr(ctx.Err(), err))
		case <-t.C:
		}
	}
	return closeNow()
}

func joinErr(a, b error) error {
	if b == nil {
		return a
	}
	return fmt.Errorf("%w; %w", a, b)
}

// signalSink adapts a function to a sink for Manager.Subscribe. The
// function must not block.
type signalSink func(sink.Event)

func (f signalSink) Enqueue(e sink.Event) error { f(e); return nil }
func (f signalSink) EnqueueMany(es []sink.Event) error {
	for _, e := range es {
		f(e)
	}
	return nil
}
func (f signalSink) EnqueueLossy(e sink.Event) bool { f(e); return true }
func (f signalSink) Prepare(es []sink.Event) (sink.Txn, error) {
	return nil, fmt.Errorf("%w: signal sink has no transactions", sink.ErrRejected)
}
func (f signalSink) Len() int                    { return 0 }
func (f signalSink) SetPredicate(sink.Predicate) {}
func (f signalSink) Predicate() sink.Predicate   { return nil }

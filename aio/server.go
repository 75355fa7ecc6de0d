package aio

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Server is a listening socket (Sandstorm's asyncServerSocket). Its sink
// receives ListenSucceeded, then one *Connection per accepted connection,
// and ServerClosed at the end.
//
// The server owns its listening socket(s) and one accept goroutine for
// each, a gnet engine (the event loops that serve the accepted
// connections) and a maintenance goroutine; Close or Shutdown stops and
// waits for all of them.
//
// Accepting is done here rather than by gnet because gnet stops its whole
// engine, connections included, when accept(2) fails with anything but
// EAGAIN, ECONNABORTED or EINTR. Here a failed accept (EMFILE and ENFILE
// when descriptors run out, ENOBUFS, ENOMEM, ...) is counted in
// AcceptErrors, logged once per burst of failures, and retried after a
// back-off (5ms doubling to 500ms); the listener stays open, the pending
// connections wait in its backlog, and open connections are served
// meanwhile.
type Server struct {
	eng     *engine
	sink    Receiver
	addr    net.Addr
	loops   *eventLoops
	lns     []net.Listener
	acceptW sync.WaitGroup // accept loops and the enrolls they started
	// enrolling bounds the connections being handed to the event loops at
	// once; enrollErr is the last hand-over that failed for lack of
	// resources, for the accept loop to back off.
	enrolling chan struct{}
	enrollErr atomic.Pointer[error]
	// lastHoldWarn is when (Unix ns) awaitDescriptor last warned; held
	// counts the connections it holds, for the accept loops to pause.
	lastHoldWarn atomic.Int64
	held         atomic.Int64
	quit         chan struct{} // closed by Close: accept loops stop backing off

	suspended atomic.Bool
	unsub     func()

	closeMu sync.Mutex
	closed  bool
}

// Listen starts a server socket on cfg.Addr. It returns once the socket
// listens (or failed to: the error is also delivered to s as ListenFailed).
// Connections are delivered to s as *Connection events; if s rejects one,
// that connection is closed at once (admission control at accept). env is
// what the socket is plugged into (see Env; the zero Env will do).
func Listen(cfg SocketConfig, s Receiver, env Env) (*Server, error) {
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
	_, network, address, err := splitAddr(cfg.Addr)
	if err != nil {
		return fail(err)
	}
	cfg, env = cfg.withDefaults(), env.withDefaults()
	name := cfg.Name
	if name == "" {
		name = defaultName("server", cfg.Addr)
	}
	lns, err := listeners(cfg, network, address)
	if err != nil {
		return fail(fmt.Errorf("aio: listen on %s: %w", cfg.Addr, err))
	}
	srv := &Server{sink: s, lns: lns, addr: lns[0].Addr(), quit: make(chan struct{}), enrolling: make(chan struct{}, 256)}
	e := newEngine(cfg, env, name)
	e.server = srv
	if cfg.TLS != nil {
		if e.tls, err = newTLSServer(cfg, env.Manager); err != nil {
			for _, ln := range lns {
				_ = ln.Close()
			}
			return fail(err)
		}
	}
	srv.eng = e
	loops, err := startEventLoops(e)
	if err != nil {
		for _, ln := range lns {
			_ = ln.Close()
		}
		err = fmt.Errorf("aio: listen on %s: event loops: %w", cfg.Addr, err)
		e.setClosing()
		e.finish(ListenFailed{Addr: cfg.Addr, Err: err}, s)
		return nil, err
	}
	srv.loops = loops
	e.start()
	e.box.send(delivery{to: s, ev: ListenSucceeded{Server: srv, Addr: srv.addr}})
	if env.Manager != nil {
		srv.unsub = env.Manager.Subscribe(stage.SignalShutdownStarted, signalSink(func(sink.Event) { srv.SuspendAccept() }))
	}
	for _, ln := range lns {
		srv.acceptW.Add(1)
		go srv.acceptLoop(ln)
	}
	return srv, nil
}

// listeners opens the listening sockets: one, or with ReusePort one per
// event loop bound with SO_REUSEPORT (the first one chooses the port when
// address asks for port 0).
func listeners(cfg SocketConfig, network, address string) ([]net.Listener, error) {
	if network == "unix" {
		// Like gnet: a socket file left by an earlier run is replaced
		// (only a socket; any other file is an error from bind).
		if fi, err := os.Lstat(address); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(address)
		}
	}
	// KeepAlive -1: Go's listener would switch 15 s keep-alive probes on
	// for every accepted connection (four setsockopt calls each); the
	// configuration's KeepAlive decides instead, applied at enrollment.
	lc := net.ListenConfig{KeepAlive: -1}
	n := 1
	if cfg.ReusePort && network != "unix" {
		n = cfg.EventLoops
		if n <= 0 {
			n = runtime.NumCPU()
		}
		lc.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			})
			return errors.Join(err, serr)
		}
	}
	var lns []net.Listener
	for i := range n {
		ln, err := lc.Listen(context.Background(), network, address)
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
		if i == 0 && n > 1 {
			address = ln.Addr().String() // the port the kernel chose
		}
	}
	return lns, nil
}

// Back-off after a failed accept: it starts at acceptBackoffMin and doubles
// up to acceptBackoffMax while accept keeps failing.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = 500 * time.Millisecond
)

// acceptWarnEvery spaces the warnings about failed accepts: a server at
// its descriptor limit flaps between failing and accepting as connections
// close, and one line per flap would flood the log.
const acceptWarnEvery = 10 * time.Second

// acceptLoop accepts connections from ln until Close closes it. A run of
// failed accepts is logged once (a warning at most every acceptWarnEvery,
// with the failures since the last one) and its end once; every failure is
// counted in AcceptErrors.
func (s *Server) acceptLoop(ln net.Listener) {
	defer s.acceptW.Done()
	var (
		backoff  time.Duration
		failures int // in the current run of failures
		unlogged int // failures since the last warning
		since    time.Time
		warned   bool // the current run was logged
		lastWarn time.Time
	)
	failed := func(err error) bool {
		s.eng.stats.acceptErrors.Add(1)
		now := time.Now()
		if failures == 0 {
			since = now
		}
		failures++
		unlogged++
		if lastWarn.IsZero() || now.Sub(lastWarn) >= acceptWarnEvery {
			s.eng.log.Warn("aio: accept failed; backing off and retrying (further failures are counted, not logged, until accepting works again)",
				"err", err, "failures", unlogged)
			lastWarn, unlogged, warned = now, 0, true
		}
		backoff = min(max(2*backoff, acceptBackoffMin), acceptBackoffMax)
		t := time.NewTimer(backoff)
		defer t.Stop()
		select {
		case <-s.quit:
			return false
		case <-t.C:
			return true
		}
	}
	for {
		if ep := s.enrollErr.Swap(nil); ep != nil {
			if !failed(*ep) {
				return
			}
			continue
		}
		if s.held.Load() > 0 {
			// A connection waits for a descriptor (awaitDescriptor): the
			// next one freed is its, not a new accept's, which would need
			// a duplicate of its own and wait beside it.
			t := time.NewTimer(acceptBackoffMin)
			select {
			case <-s.quit:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if !failed(err) {
				return
			}
			continue
		}
		if err := s.admit(nc); err != nil {
			if !failed(err) {
				return
			}
			continue
		}
		if failures > 0 {
			if warned {
				s.eng.log.Info("aio: accepting again", "failures", failures, "after", time.Since(since).Round(time.Millisecond))
			}
			failures, backoff, warned = 0, 0, false
		}
	}
}

// admit hands an accepted connection to the event loops, or closes it at
// once: accept suspended, MaxConnections open already, server closing. It
// returns an error only when the connection could not be handed over for
// lack of resources (gnet duplicates the descriptor, which fails with
// EMFILE at the limit), which counts as a failed accept.
func (s *Server) admit(nc net.Conn) error {
	e := s.eng
	if s.suspended.Load() {
		e.stats.rejectedAccepts.Add(1)
		_ = nc.Close()
		return nil
	}
	if !e.reserve(e.cfg.MaxConnections) { // counts connections still being enrolled
		e.stats.rejectedAccepts.Add(1)
		e.stats.overLimit.Add(1)
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // refuse with RST: no TIME_WAIT kept here
		}
		_ = nc.Close()
		return nil
	}
	// EnrollContext duplicates the descriptor, closes nc and waits until
	// an event loop ran OnOpen: on a busy loop that is a loop iteration, so
	// the accept loop does not wait for it (connections would get in one
	// per iteration; a 1024-client run saw the first request on a new
	// connection wait 0.45 s). At most cap(enrolling) wait at once.
	select {
	case s.enrolling <- struct{}{}:
	case <-s.quit:
		e.unreserve()
		_ = nc.Close()
		return nil
	}
	s.acceptW.Add(1)
	go func() {
		defer s.acceptW.Done()
		defer func() { <-s.enrolling }()
		if !s.awaitDescriptor(nc) {
			e.unreserve()
			_ = nc.Close()
			return
		}
		gc, err := s.loops.enroll(nc, nil)
		if gc == nil {
			e.unreserve() // OnOpen never ran
		}
		if err != nil && !e.isClosing() {
			s.enrollErr.Store(&err)
		}
	}()
	return nil
}

// awaitDescriptor holds an accepted connection until the process has a
// descriptor to spare for it: gnet's enroll duplicates the connection's
// descriptor and closes the original, and a failed duplicate would reset
// a connection the kernel had completed (and lose what the peer sent).
// Each failed try counts as a failed accept (a warning at most every
// acceptWarnEvery); the connection is kept and tried again after
// acceptBackoffMin, doubling up to acceptBackoffMax, and the accept loops
// pause while it is held, so that connections do not pile up waiting.
// It returns false when the server closes first. Between the probe and
// gnet's own duplicate another thread may take the descriptor; that
// hand-over then fails as before (counted and logged by the accept loop).
func (s *Server) awaitDescriptor(nc net.Conn) bool {
	backoff := acceptBackoffMin
	var since time.Time
	defer func() {
		if !since.IsZero() {
			s.held.Add(-1)
		}
	}()
	for {
		err := probeDup(nc)
		if err == nil || !isOutOfDescriptors(err) {
			if !since.IsZero() {
				s.eng.log.Info("aio: accepted connection handed over once a descriptor was free",
					"waited", time.Since(since).Round(time.Millisecond))
			}
			return true // other errors are EnrollContext's to report
		}
		s.eng.stats.acceptErrors.Add(1)
		now := time.Now()
		if since.IsZero() {
			since = now
			s.held.Add(1)
		}
		if last := s.lastHoldWarn.Load(); last == 0 || now.Sub(time.Unix(0, last)) >= acceptWarnEvery {
			if s.lastHoldWarn.CompareAndSwap(last, now.UnixNano()) {
				s.eng.log.Warn("aio: no descriptor free to hand an accepted connection to an event loop; holding it and retrying",
					"err", err, "remote", nc.RemoteAddr().String())
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-s.quit:
			t.Stop()
			return false
		case <-t.C:
		}
		backoff = min(2*backoff, acceptBackoffMax)
	}
}

// probeDup duplicates nc's descriptor and closes the duplicate at once: it
// tells whether a descriptor is free for gnet's enroll.
func probeDup(nc net.Conn) error {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var dupErr error
	if err := rc.Control(func(fd uintptr) {
		var d int
		if d, dupErr = unix.Dup(int(fd)); dupErr == nil {
			_ = unix.Close(d)
		}
	}); err != nil {
		return nil
	}
	return dupErr
}

// isOutOfDescriptors reports whether err is EMFILE or ENFILE.
func isOutOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// OnBoot runs when the event loops start.
func (e *engine) OnBoot(gnet.Engine) gnet.Action { return gnet.None }

func (s *Server) box() *postbox { return &s.eng.box }

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

// SuspendAccept stops handing out new connections: while suspended,
// connections the kernel completes are accepted and closed at once
// (counted in RejectedAccepts), so that clients learn at once rather than
// wait in the backlog; the listening socket stays open and existing
// connections are not affected. A server created with a Manager suspends
// itself when the manager raises stage.SignalShutdownStarted.
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
	// Accepting stops first: every connection handed to gnet is open (or
	// refused) before the event loops stop.
	s.eng.setClosing()
	close(s.quit)
	for _, ln := range s.lns {
		_ = ln.Close()
	}
	s.acceptW.Wait()
	err := s.loops.stop()
	s.eng.finish(ServerClosed{Server: s}, s.sink)
	if err != nil {
		return fmt.Errorf("aio: close %s: %w", s.eng.name, err)
	}
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

package aio

import (
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	metrics "github.com/rcrowley/go-metrics"

	"github.com/sandstorm-go/sandstorm/sink"
)

// engine is what a Server and a Client share: the gnet event handler, the
// table of open connections, the maintenance goroutine and the counters.
//
// Threading: gnet calls the handler methods on its event-loop goroutines.
// Everything they do is non-blocking (atomics, short mutexes, non-blocking
// enqueues). Work that has to wait (a sink that rejected, a governor pause,
// output still draining, timeouts) is put on the watch set and picked up by
// the maintenance goroutine, which wakes the connection back onto its event
// loop with gnet's Conn.Wake, the only way into a loop from outside besides
// AsyncWrite and Close.
type engine struct {
	gnet.BuiltinEventEngine

	cfg    SocketConfig // defaults applied
	env    Env          // defaults applied
	name   string
	log    *slog.Logger
	server *Server    // nil for a client
	tls    *tlsServer // nil without TLS
	gov    *Governor
	stats  counters

	// loops holds each event loop's traffic counter (see yieldEvery),
	// made when the loop's first connection opens.
	lmu   sync.Mutex
	loops map[gnet.EventLoop]*loopTraffic

	mu    sync.Mutex
	conns map[*Connection]struct{}
	held  map[*Connection]struct{} // closed, bytes kept for StartReader
	// enrolling counts accepted connections handed to an event loop whose
	// OnOpen has not run yet (see reserve).
	enrolling int
	closing   bool

	wmu   sync.Mutex
	watch map[*Connection]int64 // when each watched connection is due (sink.Nanotime)
	wheap watchHeap             // the same, ordered; entries not matching watch are stale
	kick  chan struct{}

	box     postbox // socket-level events
	boxWait atomic.Bool
	nextID  atomic.Uint64
	// readerWakes counts the event-loop wake-ups StartReader asked for
	// (tests read it).
	readerWakes atomic.Uint64

	stop    chan struct{}
	stopped atomic.Bool
	wg      sync.WaitGroup

	gateWarn sync.Once // the warning that reading cannot be stopped

	files fileSending // file segments: the write poller (sendfile.go)

	metricReg    metrics.Registry
	metricPrefix string // "aio.<name>", or with a suffix if that was taken
	metricNames  []string
}

func newEngine(cfg SocketConfig, env Env, name string) *engine {
	e := &engine{
		cfg:   cfg,
		env:   env,
		name:  name,
		log:   env.Logger.With("socket", name),
		conns: map[*Connection]struct{}{},
		held:  map[*Connection]struct{}{},
		watch: map[*Connection]int64{},
		loops: map[gnet.EventLoop]*loopTraffic{},
		kick:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
	}
	if cfg.ReadRate.Enabled() && !cfg.ReadRate.PerConnection {
		e.gov = NewGovernor(cfg.ReadRate, int(cfg.ReadBuffer))
	}
	e.box.hooks = e
	e.registerMetrics()
	return e
}

// gnetOptions translates the configuration into the options of each event
// loop's gnet client engine (startEventLoops adds the loop count).
func (e *engine) gnetOptions() []gnet.Option {
	c := e.cfg
	opts := []gnet.Option{
		gnet.WithLogger(gnetLogger{e.log}),
		gnet.WithReadBufferCap(int(c.ReadBuffer)),
		// Every connection comes from Go's net package (accepted, or
		// dialed by gnet's client), which turned TCP_NODELAY on already;
		// gnet would set it again on its duplicate of the descriptor (the
		// same socket): one system call per connection for nothing.
		// TestConnectionsHaveNoDelay checks it stays on.
		gnet.WithTCPNoDelay(gnet.TCPDelay),
	}
	if c.SendBuffer > 0 {
		opts = append(opts, gnet.WithSocketSendBuffer(int(c.SendBuffer)))
	}
	if c.RecvBuffer > 0 {
		opts = append(opts, gnet.WithSocketRecvBuffer(int(c.RecvBuffer)))
	}
	if c.KeepAlive > 0 {
		opts = append(opts, gnet.WithTCPKeepAlive(c.KeepAlive))
	}
	return opts
}

// start runs the maintenance goroutine.
func (e *engine) start() {
	e.wg.Add(1)
	go e.maintain()
}

// ---- gnet callbacks (event-loop goroutines; never block) ----

func (e *engine) OnOpen(gc gnet.Conn) ([]byte, gnet.Action) {
	if c, ok := gc.Context().(*Connection); ok && c != nil {
		// A client connection: Connect made c and passed it to gnet. It is
		// attached before it is published in the table (Connections,
		// closeIdle and Close use its gnet connection).
		c.attach(gc)
		if !e.add(c) {
			return nil, gnet.Close
		}
		e.stats.connected.Add(1)
		if e.tls != nil {
			// The owner gets the connection once its handshake is done, or
			// ConnectFailed.
			fail := func(err error) {
				e.stats.connectFailed.Add(1)
				e.box.send(delivery{to: c.owner, ev: ConnectFailed{Addr: c.dialHost, Value: c.Value(), Err: fmt.Errorf("aio: TLS: %w", err)}})
			}
			if !c.startTLS(e.tls, func() { e.announceClient(c) }, fail) {
				fail(ErrHandshakeRefused)
				return nil, gnet.Close
			}
			return nil, gnet.None
		}
		c.mu.Lock()
		c.announced = true
		c.mu.Unlock()
		c.box.send(delivery{to: c.owner, ev: c})
		return nil, gnet.None
	}
	s := e.server
	if s == nil || s.suspended.Load() {
		if s != nil {
			e.unreserve()
		}
		e.stats.rejectedAccepts.Add(1)
		return nil, gnet.Close
	}
	c := newConnection(e, s.sink, nil)
	c.attach(gc)
	gc.SetContext(c)
	if !e.addEnrolled(c) {
		e.stats.rejectedAccepts.Add(1)
		return nil, gnet.Close
	}
	e.stats.accepted.Add(1)
	if e.tls != nil {
		// The application sees the connection once its handshake is done.
		if !c.startTLS(e.tls, func() { e.announce(c) }, nil) {
			e.stats.rejectedAccepts.Add(1)
			c.mu.Lock()
			c.reason = ClosedLocal
			c.mu.Unlock()
			return nil, gnet.Close
		}
		return nil, gnet.None
	}
	var err error
	c.loopAnnounce(func() { err = s.box().sendNow(delivery{to: s.sink, ev: c}) })
	if err != nil {
		// Admission control at accept: the application's stage refused the
		// connection, so it is closed at once and nobody ever sees it.
		e.stats.rejectedAccepts.Add(1)
		e.log.Debug("aio: connection refused by sink", "err", err)
		c.mu.Lock()
		c.reason = ClosedLocal
		c.mu.Unlock()
		return nil, gnet.Close
	}
	c.mu.Lock()
	c.announced = true
	c.mu.Unlock()
	return nil, gnet.None
}

// announce hands a TLS connection whose handshake succeeded to the
// server's sink (the connection's event loop: announceOnLoop).
func (e *engine) announce(c *Connection) {
	c.mu.Lock()
	if c.state != stateOpen {
		c.mu.Unlock()
		return
	}
	c.announced = true
	c.mu.Unlock()
	if err := e.server.box().sendNow(delivery{to: e.server.sink, ev: c}); err != nil {
		e.stats.rejectedAccepts.Add(1)
		e.log.Debug("aio: connection refused by sink", "err", err)
		c.closeWith(ClosedLocal, nil)
	}
	// Records that arrived with the handshake's end are decrypted when the
	// application starts reading: on this event loop once announce returns
	// (loopAnnounce), or by the wake-up StartReader sends otherwise.
}

// announceClient hands a client's TLS connection to its owner (the
// connection's event loop: announceOnLoop).
func (e *engine) announceClient(c *Connection) {
	c.mu.Lock()
	if c.state != stateOpen {
		c.mu.Unlock()
		return
	}
	c.announced = true
	c.mu.Unlock()
	c.box.send(delivery{to: c.owner, ev: c})
}

func (e *engine) OnTraffic(gc gnet.Conn) gnet.Action {
	c, _ := gc.Context().(*Connection)
	if c == nil {
		return gnet.None
	}
	c.traffic.count()
	return c.onTraffic(gc)
}

// yieldEvery is how many OnTraffic calls of one event loop pass between
// two yields (runtime.Gosched) of that loop.
// An event loop that always finds input never blocks: its epoll_wait
// returns at once and its writes are fast system calls, so the Go
// scheduler sees the same goroutine running for 10 ms and has sysmon
// preempt it (a signal); every preemption also resets sysmon's sleep to
// 20 µs for its next 50 rounds, each a thread wake-up and context switch
// of the process. A yield every few hundred traffic events (about a
// millisecond's work) keeps the loop from looking long-running, at the
// cost of one scheduler pass, which switches no thread. Measured on
// 2026-11-27 at 1024 connections: see docs/haboob-bench.md.
const yieldEvery = 256

// loopTraffic counts one event loop's OnTraffic calls and the yields they
// made, and the bytes and packets its connections read and the bytes
// they wrote (the per-request counters of SocketStats). Only that loop
// adds to it, and it fills a cache line of its own: no two loops write
// the same line, where one socket-wide counter had both loops' cores
// take the line from each other on every request. (Atomic, so that
// other goroutines may read it.)
type loopTraffic struct {
	events   atomic.Uint64
	yields   atomic.Uint64
	bytesIn  atomic.Uint64
	packets  atomic.Uint64
	bytesOut atomic.Uint64
	_        [cacheLine - 40]byte

	// scratch is the loop goroutine's reusable memory for writing its
	// connections' output (loopScratch); not atomic, the loop's only.
	scratch loopScratch

	// value is the layer above's per-loop value (Connection.LoopValue),
	// set once by a compare-and-swap.
	value atomic.Pointer[any]
}

// loopScratch holds the slices an event loop's progress uses while it
// writes one connection's output and completes its requests: the ops
// taken from behind the window (takePumpLocked), the pieces of their
// writev (pump) and the requests completed (completedLocked). One set
// per loop rather than one per connection: the loop serves one
// connection at a time, and at 1024 connections a connection's own
// slices are cold memory on every request (each write into them a cache
// miss that the next unlock waits for), where the loop's are warm.
// Event loop only. A slice is taken (its field set to nil) while in use
// and given back after, so that a progress nested in a completion's
// callback finds none and makes its own.
type loopScratch struct {
	ops  []writeOp
	bufs [][]byte
	done []pendingWrite
}

// loopSums adds up the loops' byte and packet counters.
func (e *engine) loopSums() (bytesIn, packets, bytesOut uint64) {
	e.lmu.Lock()
	defer e.lmu.Unlock()
	for _, t := range e.loops {
		bytesIn += t.bytesIn.Load()
		packets += t.packets.Load()
		bytesOut += t.bytesOut.Load()
	}
	return bytesIn, packets, bytesOut
}

// cacheLine is the size of a CPU cache line on the platforms Go supports
// best (amd64, arm64 without its 128-byte parts).
const cacheLine = 64

// count records one OnTraffic call and yields every yieldEvery calls.
func (t *loopTraffic) count() {
	if t.events.Add(1)%yieldEvery == 0 {
		t.yields.Add(1)
		runtime.Gosched()
	}
}

// loopTraffic returns the traffic counter of the event loop gc belongs to.
// Called once per connection, when it opens.
func (e *engine) loopTraffic(gc gnet.Conn) *loopTraffic {
	loop := gc.EventLoop()
	e.lmu.Lock()
	defer e.lmu.Unlock()
	t := e.loops[loop]
	if t == nil {
		t = new(loopTraffic)
		e.loops[loop] = t
	}
	return t
}

func (e *engine) OnClose(gc gnet.Conn, err error) gnet.Action {
	c, _ := gc.Context().(*Connection)
	if c == nil {
		return gnet.None
	}
	c.onClose(gc, err)
	e.remove(c)
	return gnet.None
}

// ---- connection table ----

func (e *engine) add(c *Connection) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return false
	}
	e.conns[c] = struct{}{}
	return true
}

func (e *engine) remove(c *Connection) {
	e.mu.Lock()
	delete(e.conns, c)
	e.mu.Unlock()
	e.stats.closed.Add(1)
}

func (e *engine) hold(c *Connection) {
	e.mu.Lock()
	e.held[c] = struct{}{}
	e.mu.Unlock()
}

func (e *engine) unhold(c *Connection) {
	e.mu.Lock()
	delete(e.held, c)
	e.mu.Unlock()
}

func (e *engine) snapshot() []*Connection {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*Connection, 0, len(e.conns))
	for c := range e.conns {
		out = append(out, c)
	}
	return out
}

// reserve counts a connection being handed to an event loop (a server's
// enroll) against max (0: no limit): it reports false, reserving nothing,
// if the open connections and those already on their way reach max.
func (e *engine) reserve(max int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if max > 0 && len(e.conns)+e.enrolling >= max {
		return false
	}
	e.enrolling++
	return true
}

// unreserve ends a reservation whose connection never reached OnOpen's
// table (the enroll failed, or OnOpen refused it).
func (e *engine) unreserve() {
	e.mu.Lock()
	e.enrolling--
	e.mu.Unlock()
}

// addEnrolled is add for a connection that reserve counted: the
// reservation becomes the connection, in one step, so that the limit
// never sees it twice or not at all.
func (e *engine) addEnrolled(c *Connection) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.enrolling--
	if e.closing {
		return false
	}
	e.conns[c] = struct{}{}
	return true
}

func (e *engine) open() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.conns)
}

func (e *engine) isClosing() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closing
}

func (e *engine) setClosing() {
	e.mu.Lock()
	e.closing = true
	e.mu.Unlock()
}

// ---- watch set and maintenance ----

// arm asks the maintenance goroutine to visit c one PollInterval from now.
func (e *engine) arm(c *Connection) { e.armAt(c, sink.Nanotime()+int64(e.cfg.PollInterval)) }

// armAt asks the maintenance goroutine to visit c at due (sink.Nanotime),
// or earlier if c is already due earlier.
func (e *engine) armAt(c *Connection, due int64) {
	e.wmu.Lock()
	if cur, ok := e.watch[c]; ok && cur <= due {
		e.wmu.Unlock()
		return
	}
	e.watch[c] = due
	e.wheap.push(watchItem{due: due, c: c})
	earliest := e.wheap[0].c == c && e.wheap[0].due == due
	e.wmu.Unlock()
	if earliest {
		e.poke()
	}
}

// poke wakes the maintenance goroutine to recompute its sleep.
func (e *engine) poke() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// takeDue removes the connections due at now and returns them appended
// to out[:0] (the maintenance goroutine's slice, reused).
func (e *engine) takeDue(now int64, out []*Connection) []*Connection {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	out = out[:0]
	for len(e.wheap) > 0 && e.wheap[0].due <= now {
		it := e.wheap.pop()
		if due, ok := e.watch[it.c]; ok && due == it.due {
			delete(e.watch, it.c)
			out = append(out, it.c)
		}
	}
	return out
}

// takeAll removes and returns every watched connection.
func (e *engine) takeAll() []*Connection {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	out := make([]*Connection, 0, len(e.watch))
	for c := range e.watch {
		out = append(out, c)
	}
	clear(e.watch)
	e.wheap = nil
	return out
}

// nextDue returns the earliest due time, dropping stale heap entries.
func (e *engine) nextDue() (int64, bool) {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	for len(e.wheap) > 0 {
		it := e.wheap[0]
		if due, ok := e.watch[it.c]; ok && due == it.due {
			return it.due, true
		}
		e.wheap.pop()
	}
	return 0, false
}

func (e *engine) watching() bool {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	return len(e.watch) > 0
}

type watchItem struct {
	due int64
	c   *Connection
}

// watchHeap is a binary min-heap of watchItems by due time. (Typed: a
// container/heap boxed every item pushed and popped, two objects per
// connection armed.)
type watchHeap []watchItem

// push adds it.
func (h *watchHeap) push(it watchItem) {
	*h = append(*h, it)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p].due <= s[i].due {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

// pop removes and returns the earliest item; h must not be empty.
func (h *watchHeap) pop() watchItem {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = watchItem{}
	s = s[:n]
	for i := 0; ; {
		l, least := 2*i+1, i
		if l < n && s[l].due < s[least].due {
			least = l
		}
		if r := l + 1; r < n && s[r].due < s[least].due {
			least = r
		}
		if least == i {
			break
		}
		s[i], s[least] = s[least], s[i]
		i = least
	}
	*h = s
	return top
}

// maintain is the socket's maintenance goroutine: it visits connections
// when they are due (retry a delivery, resume a paused reader, poll the
// output drain, enforce a close deadline) and closes idle connections. It
// sleeps until the next due time: an idle socket costs nothing.
func (e *engine) maintain() {
	defer e.wg.Done()
	poll := e.cfg.PollInterval
	idleEvery := time.Duration(0)
	if e.cfg.IdleTimeout > 0 {
		idleEvery = min(max(e.cfg.IdleTimeout/4, poll), time.Second)
	}
	nextIdle := time.Now().Add(idleEvery)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var dueConns []*Connection // takeDue's, reused
	for {
		wait := time.Hour
		if due, ok := e.nextDue(); ok {
			wait = time.Duration(due - sink.Nanotime())
		}
		if e.boxWait.Load() {
			wait = min(wait, poll)
		}
		if idleEvery > 0 {
			wait = min(wait, time.Until(nextIdle))
		}
		timer.Reset(max(wait, 0))
		select {
		case <-e.stop:
			return
		case <-e.kick:
			continue // something became due earlier: sleep again, shorter
		case <-timer.C:
		}
		now := time.Now()
		dueConns = e.takeDue(sink.Nanotime(), dueConns)
		for i, c := range dueConns {
			c.tick(now)
			dueConns[i] = nil // not kept alive until the next visit
		}
		if e.boxWait.Swap(false) {
			e.box.drain()
		}
		if idleEvery > 0 && !now.Before(nextIdle) {
			e.closeIdle(sink.Nanotime())
			nextIdle = now.Add(idleEvery)
		}
	}
}

// closeIdle closes the connections with no progress in or out for the
// idle timeout before now (sink.Nanotime, like Connection.activity).
func (e *engine) closeIdle(now int64) {
	// Connection.activity lags the last progress by up to activityGrain.
	cut := now - int64(e.cfg.IdleTimeout) - activityGrain(e.cfg.IdleTimeout)
	for _, c := range e.snapshot() {
		if c.stopped.Load() && c.loadReader() != nil {
			// Quiet because its reading is stopped: the application
			// is behind, not the peer.
			continue
		}
		if c.activity.Load() < cut {
			// Counted once, however long gnet takes to close it.
			c.closeCounted(ClosedIdle, ErrIdleTimeout, &e.stats.idleClosed)
		}
	}
}

// finish stops the maintenance goroutine (gnet must be stopped already, so
// every connection has had its OnClose), makes a last attempt at every
// pending delivery and reports what cannot be delivered.
func (e *engine) finish(last sink.Event, to Receiver) {
	if !e.stopped.CompareAndSwap(false, true) {
		return
	}
	close(e.stop)
	e.wg.Wait()
	e.files.stop()
	e.mu.Lock()
	held := e.held
	e.held = map[*Connection]struct{}{}
	e.mu.Unlock()
	for c := range held {
		c.releaseHeld()
	}
	for _, c := range e.takeAll() {
		c.finish()
	}
	if last != nil && to != nil {
		e.box.send(delivery{to: to, ev: last})
	}
	e.box.drain()
	for _, d := range e.box.discard() {
		e.lostEvent(d, fmt.Errorf("%w: sink still rejecting at close", sink.ErrRejected))
	}
	e.unregisterMetrics()
}

// noGate counts a connection that cannot stop reading its socket
// (InboundPause falls back to MaxInbound) and warns once per socket.
func (e *engine) noGate(err error) {
	e.stats.pauseUnsupported.Add(1)
	e.gateWarn.Do(func() {
		e.log.Warn("aio: cannot stop reading sockets; inbound bytes are bounded by maxInbound instead", "err", err)
	})
}

// retryDrain has the maintenance goroutine drain the engine's postbox
// (boxHooks).
func (e *engine) retryDrain() { e.boxWait.Store(true); e.poke() }

// drainSoon is retryDrain (boxHooks).
func (e *engine) drainSoon() { e.retryDrain() }

// countRejected counts nothing: a connection the server's sink refused
// is counted where it is closed (boxHooks).
func (e *engine) countRejected() {}

// lostEvent logs and counts an event no sink will take (boxHooks).
func (e *engine) lostEvent(d delivery, err error) {
	e.stats.lost.Add(1)
	e.log.Warn("aio: event not delivered", "event", fmt.Sprintf("%T", d.ev), "sink", fmt.Sprint(d.to), "err", err)
}

// ---- addresses ----

// splitAddr turns a configured address into gnet's URL form and the
// network/address pair for net.Dial.
func splitAddr(addr string) (gnetURL, network, address string, err error) {
	if addr == "" {
		return "", "", "", fmt.Errorf("%w: empty address", ErrInvalidConfig)
	}
	network, address = "tcp", addr
	if scheme, rest, ok := strings.Cut(addr, "://"); ok {
		network, address = scheme, rest
	}
	switch network {
	case "tcp", "tcp4", "tcp6":
		if _, _, err := net.SplitHostPort(address); err != nil {
			return "", "", "", fmt.Errorf("%w: address %q: %w", ErrInvalidConfig, addr, err)
		}
	case "unix":
		if address == "" {
			return "", "", "", fmt.Errorf("%w: address %q: empty path", ErrInvalidConfig, addr)
		}
	default:
		return "", "", "", fmt.Errorf("%w: address %q: unsupported network %q (tcp, tcp4, tcp6, unix)", ErrInvalidConfig, addr, network)
	}
	return network + "://" + address, network, address, nil
}

// cloneAddr is a copy of a connection's address the connection keeps. A
// TCP address without a zone is kept as it is: it is the one Go's net
// package made for this connection when it accepted or dialed it (gnet's
// enroll passes it on). One with a zone (an IPv6 link-local peer) is
// copied: gnet gives the zone's bytes to its buffer pool when the
// connection closes, so a later read could overwrite them under a log
// line or a principal's key. A Unix address is copied: gnet's enroll
// rewrites the local address's name.
func cloneAddr(a net.Addr) net.Addr {
	switch v := a.(type) {
	case *net.TCPAddr:
		if v.Zone == "" {
			return v
		}
		return &net.TCPAddr{IP: append(net.IP(nil), v.IP...), Port: v.Port, Zone: strings.Clone(v.Zone)}
	case *net.UnixAddr:
		return &net.UnixAddr{Name: strings.Clone(v.Name), Net: v.Net}
	case nil:
		return nil
	}
	return a
}

func defaultName(kind, addr string) string {
	if addr == "" {
		return kind
	}
	r := strings.NewReplacer(":", "_", "/", "_", ".", "_", "[", "", "]", "")
	return kind + "-" + r.Replace(addr)
}

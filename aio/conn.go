package aio

import (
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/sandstorm-go/sandstorm/sink"
)

// Back-off caps, in PollIntervals: delivery retries to a rejecting sink,
// and drain polls of a connection whose output does not move.
const (
	maxRetryPolls = 16
	maxDrainPolls = 32
)

type connState uint8

const (
	stateOpen      connState = iota
	stateClosing             // graceful close: waiting for output to drain
	stateLingering           // output sent, FIN sent: discarding input until EOF or LingerTimeout
	stateAborting            // gnet Close requested
	stateClosed              // OnClose ran; the gnet conn is gone
)

// Connection is an open TCP (or Unix) connection. It is a sink.Sink of
// outgoing buffers: enqueue []byte, WriteRequest or CloseRequest events.
// Incoming bytes are delivered as Packet events to the sink given to
// StartReader. Status events (SinkClogged, SinkClosed) go to the reader
// sink, or, before StartReader, to the sink that received the Connection.
//
// Enqueue never blocks. A write is refused (an error wrapping
// sink.ErrRejected and ErrClogged) when the connection's unsent output
// would pass its WriteThreshold; see ClogPolicy. All methods are safe for
// concurrent use.
//
// A Connection is three owners' state side by side, and its code is
// grouped by the goroutine that runs it:
//   - outbox (conn_outbox.go): the producer side, the connection's one
//     output queue; any goroutine, under outbox.mu;
//   - loopState (conn_loop.go): the gnet event loop's side: reading,
//     write progress, OnClose;
//   - the maintenance goroutine's visits (conn_tick.go): delivery retries,
//     deadlines, timers.
//
// The fields of Connection itself are set before the connection is
// published (OnOpen, before it is added to the engine's table or
// delivered to a sink) and never change, or are atomics any goroutine
// uses.
type Connection struct {
	// The fields an event loop reads or writes for every request come
	// first, packed into as few cache lines as they fit: at 1024
	// connections a connection's memory has left the CPU's cache by its
	// next request, and each line a request touches is a miss (docs/
	// haboob-bench.md, "The kernel side per request at 1024
	// connections"). Then the ones used per connection or rarely.

	// Identity and wiring: immutable once published.
	eng *engine
	cfg *SocketConfig
	gc  gnet.Conn
	// tls is the connection's TLS session (nil without TLS); set before
	// the connection is announced, never changed.
	tls *tlsSession
	gov *Governor // the read rate's, if per connection (read checks it per packet)

	// reader is the sink given to StartReader: set once, under mu, before
	// readerSet (outbox); read only after readerSet.Load() (loadReader).
	// It lies here rather than behind a pointer: every packet's delivery
	// reads it, and a separate object would be one more cold line.
	reader Receiver

	outbox
	loopState
	box postbox // events for the application's sinks, in order
	connCounters

	// Used per connection or rarely.

	// Identity and wiring: immutable once published.
	id     uint64
	local  net.Addr
	remote net.Addr
	owner  Receiver
	// dialHost is the host a client connection dialed (its TLS server
	// name unless the configuration names one).
	dialHost string
	// writtenCB is c.written as a value, made once (not per write).
	writtenCB gnet.AsyncCallback

	// Any goroutine (atomics, or a type with its own lock).
	value atomic.Pointer[any]
	// loopDelivers is set while the event loop announces c from one of
	// its callbacks and then delivers what is buffered itself (OnOpen,
	// a TLS handshake that ended in onTraffic): a StartReader meanwhile
	// does not wake the loop (loopAnnounce).
	loopDelivers atomic.Bool
	// timerAt is SetTimer's due time (sink.Nanotime; 0: none): set by any
	// goroutine, taken by the maintenance goroutine.
	timerAt atomic.Int64
	// retryDelay is the back-off of delivery retries (nanoseconds): grown
	// by whoever finds a sink rejecting, reset by the maintenance
	// goroutine once the postbox is empty.
	retryDelay atomic.Int64
	// The outbox's state of closes, clogs, reservations and admission
	// (guarded by outbox.mu, but for adm).
	outboxRare
	// own is the connection's own loopScratch, used only while it has no
	// event loop's (loopState.traffic nil: before attach); scratch
	// returns it. Event loop only.
	own loopScratch
}

// connCounters are a connection's statistics: atomics, any goroutine adds.
// bytesIn and packets are added per packet; the rest rarely.
type connCounters struct {
	bytesIn   atomic.Uint64
	packets   atomic.Uint64
	maxUnread atomic.Int64
	rejected  atomic.Uint64
	readStops atomic.Uint64
	govPauses atomic.Uint64
}

// loopState is a connection's event-loop side: reading, the read gate
// and the pacing of drain polls.
//
// Owner: the connection's gnet event loop goroutine (its OnOpen,
// OnTraffic, OnClose and AsyncWrite callbacks, and what Wake makes it
// run). The plain fields are that goroutine's only. The atomics are
// written by it and read by the maintenance goroutine and Stats.
type loopState struct {
	traffic   *loopTraffic  // the event loop's traffic counter (set by attach)
	gate      readGate      // stops and resumes polling the socket for input
	readOff   bool          // reading is stopped by the gate
	pollDelay time.Duration // back-off of drain polls without progress
	seq       uint64        // the last Packet's Seq
	seen      int           // inbound bytes left in gnet's buffer after the last traffic

	activity atomic.Int64 // sink.Nanotime of the last progress in or out
	paused   atomic.Bool  // delivery stopped (sink rejected or governor)
	stopped  atomic.Bool  // the socket is not polled for input (readOff)
	resumeAt atomic.Int64 // governor pause end (sink.Nanotime)
}

var _ sink.Sink = (*Connection)(nil)

func newConnection(e *engine, owner Receiver, value any) *Connection {
	c := &Connection{eng: e, cfg: &e.cfg, id: e.nextID.Add(1), owner: owner, gov: e.gov}
	if value != nil {
		c.value.Store(&value)
	}
	if e.cfg.ReadRate.Enabled() && e.cfg.ReadRate.PerConnection {
		c.gov = NewGovernor(e.cfg.ReadRate, int(e.cfg.ReadBuffer))
	}
	c.writtenCB = c.written
	c.retryDelay.Store(int64(e.cfg.PollInterval))
	c.box.hooks = c
	c.activity.Store(sink.Nanotime())
	return c
}

// attach binds c to its gnet connection (event loop, in OnOpen, before c
// is published: added to the engine's table or delivered to a sink).
func (c *Connection) attach(gc gnet.Conn) {
	c.mu.Lock()
	c.gc = gc
	c.traffic = c.eng.loopTraffic(gc)
	c.local = cloneAddr(gc.LocalAddr())
	c.remote = cloneAddr(gc.RemoteAddr())
	c.mu.Unlock()
	if c.cfg.InboundPolicy == InboundPause {
		c.gate = newReadGate(gc)
		if !c.gate.ok() {
			c.eng.noGate(gateError())
		}
	}
}

// ID is unique among the connections of a socket.
func (c *Connection) ID() uint64 { return c.id }

// LocalAddr is the connection's local address.
func (c *Connection) LocalAddr() net.Addr { return c.local }

// RemoteAddr is the peer's address.
func (c *Connection) RemoteAddr() net.Addr { return c.remote }

// Value returns the value attached with SetValue (or given to Connect).
func (c *Connection) Value() any {
	if p := c.value.Load(); p != nil {
		return *p
	}
	return nil
}

// SetValue attaches an application value (for example a protocol parser).
func (c *Connection) SetValue(v any) { c.value.Store(&v) }

// LoopValue returns the value kept for c's event loop, shared by every
// connection the loop serves: made by mk at the first call for the loop,
// the same value at every later call, whichever connection of the loop
// makes it. It is nil for a connection not attached to an event loop yet
// (the caller then does without, or makes its own).
//
// There is one value per event loop per socket, with no key: every user
// of the loop's connections gets the same value, whichever mk made it.
// So a caller must type-check what it gets back and fall back (to
// memory of its own) when it is not its type; in practice one layer per
// socket uses it, such as the HTTP server.
//
// mk runs without any lock held, and may itself call LoopValue; when
// first calls race, each may run its mk, one value is kept and every
// caller gets that one (the others' are dropped). Safe for concurrent
// use; what the value holds is its own to guard, as any goroutine may
// reach it.
//
// It is for memory a loop's connections use one at a time and often: a
// loop's value stays in the loop's CPU cache, where at 1024 connections
// a connection's own memory has left it by its next request (docs/
// haboob-bench.md, "Cutting the cold lines").
func (c *Connection) LoopValue(mk func() any) any {
	t := c.traffic
	if t == nil {
		return nil
	}
	if v := t.value.Load(); v != nil {
		return *v
	}
	// Built outside any lock (DESIGN §8: mk is the layer above's code),
	// published by a compare-and-swap; a loser takes the winner's.
	v := mk()
	if t.value.CompareAndSwap(nil, &v) {
		return v
	}
	return *t.value.Load()
}

// String names the connection in logs and errors.
func (c *Connection) String() string {
	return fmt.Sprintf("aio.%s#%d(%v)", c.eng.name, c.id, c.remote)
}

// events is where status events go: the reader sink once reading started.
func (c *Connection) events() Receiver {
	if r := c.loadReader(); r != nil {
		return r
	}
	return c.owner
}

// loadReader returns the reader sink, or nil before StartReader.
func (c *Connection) loadReader() Receiver {
	if c.readerSet.Load() {
		return c.reader
	}
	return nil
}

// StartReader starts delivering incoming bytes to s as Packet events, then
// SinkClosed when the connection closes. Bytes that arrived before are
// delivered first, even if the connection closed meanwhile (a peer that sent
// a request and closed at once). Reading pauses while s rejects packets:
// nothing is dropped; the bytes wait (in the kernel with InboundPause, else
// in gnet's buffer up to MaxInbound) and delivery resumes once s accepts.
func (c *Connection) StartReader(s Receiver) error {
	if s == nil {
		return fmt.Errorf("%w: StartReader with a nil sink", ErrBadEvent)
	}
	c.mu.Lock()
	if c.readerSet.Load() {
		c.mu.Unlock()
		return ErrReaderStarted
	}
	c.reader = s
	c.readerSet.Store(true)
	tail, held := c.tail, c.held
	c.tail, c.held = nil, nil
	if c.state != stateClosed && !c.loopDelivers.Load() {
		c.eng.readerWakes.Add(1)
		_ = c.gc.Wake(nil) // deliver what is buffered already
	}
	c.mu.Unlock()
	if held != nil {
		c.eng.unhold(c)
		c.sendTail(s, tail)
		c.box.send(delivery{to: s, ev: *held})
	}
	return nil
}

// retryDrain schedules the postbox's next drain, backing off while the
// sink keeps rejecting: 1, 2, 4 … 16 polls (boxHooks).
func (c *Connection) retryDrain() {
	d := c.retryDelay.Load()
	c.eng.armAt(c, sink.Nanotime()+d)
	c.retryDelay.Store(min(2*d, int64(maxRetryPolls*c.eng.cfg.PollInterval)))
}

// drainSoon has the maintenance goroutine drain the postbox at once
// (boxHooks).
func (c *Connection) drainSoon() { c.eng.armAt(c, sink.Nanotime()) }

// lostEvent logs and counts an event no sink will take (boxHooks).
func (c *Connection) lostEvent(d delivery, err error) { c.eng.lostEvent(d, err) }

// countRejected counts a packet or event the reader refused (boxHooks).
func (c *Connection) countRejected() {
	c.rejected.Add(1)
	c.eng.stats.rejectedReads.Add(1)
}

// loopAnnounce runs announce, which hands c to the application, on c's
// event loop inside one of its callbacks (OnOpen, onTraffic). The loop
// delivers whatever is buffered once announce returns (in OnOpen gnet has
// read nothing yet), so a StartReader during announce does not wake the
// loop for it (an eventfd write and read, and a task queued, per
// connection).
func (c *Connection) loopAnnounce(announce func()) {
	c.loopDelivers.Store(true)
	defer c.loopDelivers.Store(false)
	announce()
}

func (c *Connection) sendTail(to Receiver, tail []Packet) {
	for _, p := range tail {
		c.countIn(len(p.Data))
		c.box.send(delivery{to: to, ev: p})
	}
}

func (c *Connection) countIn(n int) {
	c.bytesIn.Add(uint64(n))
	c.packets.Add(1)
	if t := c.traffic; t != nil {
		t.bytesIn.Add(uint64(n)) // the loop's own line (loopTraffic)
		t.packets.Add(1)
		return
	}
	c.eng.stats.bytesIn.Add(uint64(n))
	c.eng.stats.packets.Add(1)
}

// countOut counts n bytes written to the kernel, on the loop's own line
// when the connection has one.
func (c *Connection) countOut(n int64) {
	if t := c.traffic; t != nil {
		t.bytesOut.Add(uint64(n))
		return
	}
	c.eng.stats.bytesOut.Add(uint64(n))
}

// SetTimer has the connection's event receiver (the reader, or the owner
// before StartReader) get a TimerExpired event d from now, replacing an
// earlier setting; d <= 0 cancels it. The event comes from the socket's
// maintenance goroutine; a protocol uses it for its own deadlines (a
// request that takes too long to arrive, a keep-alive connection idle for
// too long) without a goroutine of its own.
func (c *Connection) SetTimer(d time.Duration) {
	if d <= 0 {
		c.timerAt.Store(0)
		return
	}
	at := sink.Nanotime() + int64(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateClosed {
		return
	}
	c.timerAt.Store(at)
	c.eng.armAt(c, at)
}

// ConnStats are a connection's counters.
type ConnStats struct {
	BytesIn        uint64 // bytes delivered as packets
	Packets        uint64
	BytesQueued    int64 // bytes accepted for sending
	BytesFlushed   int64 // bytes written to the kernel
	Outstanding    int64 // accepted, not yet written
	MaxOutstanding int64 // highest Outstanding seen at an accepted write
	PendingWrites  int   // write requests not yet completed
	Clogs          uint64
	RefusedWrites  uint64
	RejectedReads  uint64 // deliveries a sink rejected
	// GovernorPauses counts the times the read-rate governor paused
	// delivery.
	GovernorPauses uint64
	// ReadStops counts the times reading of the socket was stopped
	// (InboundPause) because delivery had to wait.
	ReadStops uint64
	// MaxUnread is the most bytes seen waiting in gnet's inbound buffer
	// (read from the socket, not yet taken as packets).
	MaxUnread int64
	// LoopWrites counts the times the event loop wrote the bytes queued
	// while it delivered the connection's input, itself, at the end of
	// that delivery (one write or writev each); AsyncWrites the writes
	// handed to gnet's AsyncWrite (from other goroutines, or TLS) instead.
	LoopWrites, AsyncWrites uint64
	Paused                  bool // delivery is paused
	ReadStopped             bool // the socket is not being read
	Closed                  bool
}

// Stats returns the connection's counters.
func (c *Connection) Stats() ConnStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	fl := c.flushed.Load()
	return ConnStats{
		BytesIn:        c.bytesIn.Load(),
		Packets:        c.packets.Load(),
		BytesQueued:    c.queued,
		BytesFlushed:   fl,
		Outstanding:    c.queued - fl,
		MaxOutstanding: c.maxOutstanding,
		PendingWrites:  c.ring.len(),
		Clogs:          c.clogs,
		RefusedWrites:  c.refused,
		RejectedReads:  c.rejected.Load(),
		GovernorPauses: c.govPauses.Load(),
		ReadStops:      c.readStops.Load(),
		MaxUnread:      c.maxUnread.Load(),
		LoopWrites:     c.loopWrites,
		AsyncWrites:    c.asyncWrites,
		Paused:         c.paused.Load(),
		ReadStopped:    c.stopped.Load(),
		Closed:         c.state == stateClosed,
	}
}

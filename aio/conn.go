package aio

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
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

// pendingWrite is an accepted write request not yet known to be flushed.
type pendingWrite struct {
	end  int64 // cumulative byte offset just past the request
	n    int
	done Receiver
	fn   func(error)
	tag  any
}

// writeOp is one parsed write request.
type writeOp struct {
	data []byte
	bufs [][]byte
	n    int
	done Receiver
	fn   func(error)
	tag  any
}

// split returns the first k bytes of op (0 < k < op.n) and the rest; the
// completion stays with the rest.
func (op writeOp) split(k int) (head, tail writeOp) {
	head.n, tail.n = k, op.n-k
	tail.done, tail.fn, tail.tag = op.done, op.fn, op.tag
	left := k
	take := func(b []byte) {
		switch {
		case left >= len(b):
			head.bufs = append(head.bufs, b)
			left -= len(b)
		case left > 0:
			head.bufs = append(head.bufs, b[:left])
			tail.bufs = append(tail.bufs, b[left:])
			left = 0
		default:
			tail.bufs = append(tail.bufs, b)
		}
	}
	if len(op.data) > 0 {
		take(op.data)
	}
	for _, b := range op.bufs {
		if len(b) > 0 {
			take(b)
		}
	}
	return head, tail
}

type sinkRef struct{ s Receiver }

type predRef struct{ p sink.Predicate }

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
type Connection struct {
	eng    *engine
	cfg    *SocketConfig
	gc     gnet.Conn
	id     uint64
	local  net.Addr
	remote net.Addr
	owner  Receiver
	gov    *Governor
	value  atomic.Pointer[any]
	reader atomic.Pointer[sinkRef]
	pred   atomic.Pointer[predRef]
	box    outbox
	// tls is the connection's TLS session (nil without TLS); set before
	// the connection is announced, never changed.
	tls *tlsSession
	// dialHost is the host a client connection dialed (its TLS server
	// name unless the configuration names one).
	dialHost string
	// writtenCB is c.written as a value, made once (not per write).
	writtenCB gnet.AsyncCallback

	mu             sync.Mutex
	state          connState
	queued         int64 // bytes accepted by Enqueue, ever
	reservedBytes  int64 // held by prepared transactions
	reservedWrites int
	ring           deque[pendingWrite]
	later          deque[writeOp] // accepted, not yet handed to gnet: beyond the write window
	laterBytes     int64
	handed         int64        // bytes handed to gnet, ever (queued - laterBytes)
	applied        int64        // bytes gnet wrote or buffered (AsyncWrite callbacks run)
	lingerBy       int64        // lingering close deadline (sink.Nanotime; 0: none)
	linger         bool         // the graceful close lingers (see Linger)
	handoffs       deque[int64] // end offsets of AsyncWrites whose callback is due
	waiters        int          // ring entries with a Done sink
	flushes        int          // ring entries without bytes (Flush): not writes
	clogged        bool
	closeAt        int64     // graceful close: offset that must be applied
	closeBy        time.Time // graceful close deadline (zero: none)
	reason         CloseReason
	reasonErr      error
	announced      bool        // the Connection event reached the application
	held           *SinkClosed // closed before StartReader with bytes waiting
	tail           []Packet
	maxOutstanding int64
	clogs          uint64
	refused        uint64

	flushed  atomic.Int64 // bytes written to the kernel (event loop writes)
	activity atomic.Int64 // sink.Nanotime of the last progress in or out
	paused   atomic.Bool  // delivery stopped (sink rejected or governor)
	stopped  atomic.Bool  // the socket is not polled for input (readOff)
	resumeAt atomic.Int64 // governor pause end (sink.Nanotime)
	wantPoll atomic.Bool  // output drain must be watched
	timerAt  atomic.Int64 // SetTimer's due time (sink.Nanotime; 0: none)
	lastOut  atomic.Int64 // sink.Nanotime of the last output progress (or of output starting)
	released bool         // OnClose returned the connection's share of the output budget
	// retryDelay is the back-off of delivery retries (nanoseconds).
	retryDelay atomic.Int64
	bytesIn    atomic.Uint64
	packets    atomic.Uint64
	rejected   atomic.Uint64
	readStops  atomic.Uint64
	govPauses  atomic.Uint64
	maxUnread  atomic.Int64

	// Event-loop only.
	gate    readGate // stops and resumes polling the socket for input
	readOff bool     // reading is stopped by the gate

	pollDelay time.Duration // back-off of drain polls without progress
	seq       uint64
	seen      int // inbound bytes left in gnet's buffer after the last traffic
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
	c.box.retry = func() {
		// Back off while the sink keeps rejecting: 1, 2, 4 … 16 polls.
		d := c.retryDelay.Load()
		e.armAt(c, sink.Nanotime()+d)
		c.retryDelay.Store(min(2*d, int64(maxRetryPolls*e.cfg.PollInterval)))
	}
	c.box.soon = func() { e.armAt(c, sink.Nanotime()) }
	c.box.lost = e.lost
	c.box.rejected = func() {
		c.rejected.Add(1)
		e.stats.rejectedReads.Add(1)
	}
	c.activity.Store(sink.Nanotime())
	return c
}

// attach binds c to its gnet connection (event loop, in OnOpen, before c
// is published: added to the engine's table or delivered to a sink).
func (c *Connection) attach(gc gnet.Conn) {
	c.mu.Lock()
	c.gc = gc
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

// String names the connection in logs and errors.
func (c *Connection) String() string {
	return fmt.Sprintf("aio.%s#%d(%v)", c.eng.name, c.id, c.remote)
}

// events is where status events go: the reader sink once reading started.
func (c *Connection) events() Receiver {
	if r := c.reader.Load(); r != nil {
		return r.s
	}
	return c.owner
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
	if !c.reader.CompareAndSwap(nil, &sinkRef{s}) {
		return ErrReaderStarted
	}
	c.mu.Lock()
	tail, held := c.tail, c.held
	c.tail, c.held = nil, nil
	if c.state != stateClosed {
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

func (c *Connection) sendTail(to Receiver, tail []Packet) {
	for _, p := range tail {
		c.countIn(len(p.Data))
		c.box.send(delivery{to: to, ev: p})
	}
}

func (c *Connection) countIn(n int) {
	c.bytesIn.Add(uint64(n))
	c.packets.Add(1)
	c.eng.stats.bytesIn.Add(uint64(n))
	c.eng.stats.packets.Add(1)
}

// ---- writing (any goroutine) ----

// Enqueue queues an outgoing buffer: a []byte, a WriteRequest (or
// *WriteRequest), or a CloseRequest. It never blocks. The bytes must not be
// modified until they are sent (SinkDrained, or the connection closed).
func (c *Connection) Enqueue(e sink.Event) error {
	var one [1]writeOp
	ops, closeAfter, err := parseWrite(e, one[:0])
	if err != nil {
		return err
	}
	if p := c.pred.Load(); p != nil && !p.p.Accept(e) {
		return c.predicateRefused(p.p)
	}
	return c.submit(ops, closeAfter, 0, 0, true)
}

// EnqueueMany queues all of es or none of them. A CloseRequest may only
// come last.
func (c *Connection) EnqueueMany(es []sink.Event) error {
	ops, closeAfter, err := parseWrites(es)
	if err != nil {
		return err
	}
	if err := c.admitPredicate(es); err != nil {
		return err
	}
	return c.submit(ops, closeAfter, 0, 0, true)
}

// EnqueueLossy is Enqueue reporting only whether the event was accepted.
func (c *Connection) EnqueueLossy(e sink.Event) bool { return c.Enqueue(e) == nil }

// Prepare admits es against the write threshold and reserves room for
// them; Commit sends them, Abort releases the room.
func (c *Connection) Prepare(es []sink.Event) (sink.Txn, error) {
	ops, closeAfter, err := parseWrites(es)
	if err != nil {
		return nil, err
	}
	if err := c.admitPredicate(es); err != nil {
		return nil, err
	}
	total, count := sizeOf(ops)
	c.mu.Lock()
	if c.state != stateOpen {
		c.mu.Unlock()
		return nil, c.closedErr()
	}
	if count > 0 {
		if err, ev := c.admitLocked(total, count); err != nil {
			c.mu.Unlock()
			c.reportClog(ev)
			return nil, err
		}
	}
	c.reservedBytes += total
	c.reservedWrites += count
	c.mu.Unlock()
	return &connTxn{c: c, ops: ops, closeAfter: closeAfter, bytes: total, writes: count}, nil
}

type connTxn struct {
	c          *Connection
	ops        []writeOp
	closeAfter bool
	bytes      int64
	writes     int
	once       sync.Once
}

func (t *connTxn) Commit() {
	t.once.Do(func() {
		if err := t.c.submit(t.ops, t.closeAfter, t.bytes, t.writes, false); err != nil {
			// The connection closed between Prepare and Commit.
			for _, op := range t.ops {
				if op.done != nil {
					t.c.box.post(delivery{to: op.done, ev: WriteFailed{Conn: t.c, Tag: op.tag, Bytes: op.n, Err: err}})
				}
			}
		}
	})
}

func (t *connTxn) Abort() {
	t.once.Do(func() {
		t.c.mu.Lock()
		t.c.reservedBytes -= t.bytes
		t.c.reservedWrites -= t.writes
		t.c.mu.Unlock()
	})
}

// Len is the number of write requests not yet completed.
func (c *Connection) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ring.len()
}

// SetPredicate installs an admission predicate run on every enqueue (nil:
// none).
func (c *Connection) SetPredicate(p sink.Predicate) {
	if p == nil {
		c.pred.Store(nil)
		return
	}
	if b, ok := p.(sink.Binder); ok {
		b.Bind(c)
	}
	c.pred.Store(&predRef{p})
}

// Predicate returns the installed predicate, or nil.
func (c *Connection) Predicate() sink.Predicate {
	if p := c.pred.Load(); p != nil {
		return p.p
	}
	return nil
}

// Send queues data and, if done is not nil, has done receive SinkDrained
// with tag once it is sent.
func (c *Connection) Send(data []byte, done Receiver, tag any) error {
	return c.Enqueue(WriteRequest{Data: data, Done: done, Tag: tag})
}

// Flush has done receive SinkDrained with tag once every byte queued so far
// has been written to the kernel. (Writes are always started at once;
// Flush is how to learn they finished.)
func (c *Connection) Flush(done Receiver, tag any) error {
	if done == nil {
		return fmt.Errorf("%w: Flush needs a sink", ErrBadEvent)
	}
	return c.submit([]writeOp{{done: done, tag: tag}}, false, 0, 0, true)
}

// Write queues data followed by bufs, in order after every earlier write,
// like Enqueue; unlike Enqueue it is never refused for the write
// threshold. The connection hands bytes to the kernel only while its
// WriteWindow (and the socket's OutputBudget) has room; the rest waits here,
// by reference, so the slices must not change until done is called. done,
// if not nil, is called exactly once: with nil once every byte has been
// written to the kernel, or with an error if the connection closed first.
// It runs on the socket's event loop or maintenance goroutine and must not
// block. (Writing straight to the socket from the caller's goroutine when
// nothing is pending was measured: it cost more CPU and context switches
// per request than gnet's AsyncWrite, which batches a loop's writes.)
// Write returns an error (and done is not called) only if the
// connection is closing or closed. The caller bounds what it queues (an
// HTTP connection by its pipeline).
func (c *Connection) Write(data []byte, bufs [][]byte, done func(error)) error {
	n := len(data)
	for _, b := range bufs {
		n += len(b)
	}
	op := [1]writeOp{{data: data, bufs: bufs, n: n, fn: done}}
	return c.submit(op[:], false, 0, 0, false)
}

// Linger closes the connection gracefully for a peer that may still be
// sending (RFC 9112 §9.6): like Close it waits until every byte queued is
// written to the kernel, then it shuts down the sending side (the peer
// reads a FIN after the last response), and reads and discards input
// until the peer closes or LingerTimeout passes; only then is the socket
// closed. Closing at once with unread input would make the kernel send a
// reset, which destroys the responses the peer has not read yet.
func (c *Connection) Linger() error {
	c.sendCloseNotify()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stateOpen {
		return nil
	}
	c.linger = c.cfg.LingerTimeout > 0
	c.beginCloseLocked()
	return nil
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

// Close closes the connection once every byte queued before it has been
// written to the kernel (gnet itself would drop unsent output). Later writes
// are refused. If the output does not drain within CloseTimeout the
// connection is aborted. Close is idempotent; on a connection lingering
// after Linger it ends the lingering at once (a server shutting down).
func (c *Connection) Close() error {
	c.sendCloseNotify()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateLingering {
		c.abortLocked(ClosedLocal, nil) // closing a lingering connection: now
		return nil
	}
	if c.state != stateOpen {
		return nil
	}
	c.beginCloseLocked()
	return nil
}

// Abort closes the connection now, dropping unsent output.
func (c *Connection) Abort() error {
	c.closeWith(ClosedLocal, nil)
	return nil
}

func (c *Connection) beginCloseLocked() {
	c.state = stateClosing
	c.closeAt = c.queued
	if c.cfg.CloseTimeout > 0 {
		c.closeBy = time.Now().Add(c.cfg.CloseTimeout)
	}
	_ = c.gc.Wake(nil) // the event loop checks the drain
}

// closeWith closes the connection now, recording why. It reports whether
// this call started the close (false: it was closing already).
func (c *Connection) closeWith(r CloseReason, err error) bool {
	return c.closeCounted(r, err, nil)
}

// closeCounted is closeWith that also adds one to counter (when not nil)
// if it closes: before the close begins, so that the count is there by
// the time the owner hears SinkClosed.
func (c *Connection) closeCounted(r CloseReason, err error, counter *atomic.Uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateAborting || c.state == stateClosed {
		return false
	}
	if counter != nil {
		counter.Add(1)
	}
	c.abortLocked(r, err)
	return true
}

func (c *Connection) abortLocked(r CloseReason, err error) {
	if c.state == stateAborting || c.state == stateClosed {
		return
	}
	if c.reason == 0 {
		c.reason, c.reasonErr = r, err
	}
	c.state = stateAborting
	_ = c.gc.Close()
}

func (c *Connection) closedErr() error {
	return fmt.Errorf("%w: %w", ErrConnClosed, &sink.ClosedError{Sink: c.String()})
}

func (c *Connection) predicateRefused(p sink.Predicate) error {
	return &sink.RejectError{Sink: c.String(), Predicate: sink.PredicateName(p), Reason: "admission refused"}
}

func (c *Connection) admitPredicate(es []sink.Event) error {
	pr := c.pred.Load()
	if pr == nil {
		return nil
	}
	if bp, ok := pr.p.(sink.BatchPredicate); ok {
		if !bp.AcceptMany(es) {
			return c.predicateRefused(pr.p)
		}
		return nil
	}
	for _, e := range es {
		if !pr.p.Accept(e) {
			return c.predicateRefused(pr.p)
		}
	}
	return nil
}

func parseWrite(e sink.Event, ops []writeOp) ([]writeOp, bool, error) {
	switch v := e.(type) {
	case []byte:
		return append(ops, writeOp{data: v, n: len(v)}), false, nil
	case WriteRequest:
		return append(ops, requestOp(&v)), false, nil
	case *WriteRequest:
		if v == nil {
			return nil, false, fmt.Errorf("%w: nil *WriteRequest", ErrBadEvent)
		}
		return append(ops, requestOp(v)), false, nil
	case CloseRequest, *CloseRequest:
		return ops, true, nil
	}
	return nil, false, fmt.Errorf("%w: %T (want []byte, WriteRequest or CloseRequest)", ErrBadEvent, e)
}

func requestOp(r *WriteRequest) writeOp {
	n := len(r.Data)
	for _, b := range r.Bufs {
		n += len(b)
	}
	return writeOp{data: r.Data, bufs: r.Bufs, n: n, done: r.Done, tag: r.Tag}
}

func parseWrites(es []sink.Event) ([]writeOp, bool, error) {
	ops := make([]writeOp, 0, len(es))
	closeAfter := false
	for i, e := range es {
		if closeAfter {
			return nil, false, fmt.Errorf("%w: CloseRequest at %d is not the last event", ErrBadEvent, i-1)
		}
		var err error
		ops, closeAfter, err = parseWrite(e, ops)
		if err != nil {
			return nil, false, err
		}
	}
	return ops, closeAfter, nil
}

// sizeOf returns the bytes of ops and the number of writes among them: a
// request without bytes (a Flush) is not a write and does not count
// against the WriteThreshold.
func sizeOf(ops []writeOp) (total int64, count int) {
	for _, op := range ops {
		total += int64(op.n)
		if op.n > 0 {
			count++
		}
	}
	return total, count
}

// admitLocked checks a write of total bytes in count requests against the
// threshold. On refusal it returns the error and, for the first refusal of
// an episode, the SinkClogged event to deliver (after unlocking).
func (c *Connection) admitLocked(total int64, count int) (error, *SinkClogged) {
	lim := c.cfg.WriteThreshold
	out := c.queued + c.reservedBytes - c.flushed.Load()
	writes := c.ring.len() - c.flushes + c.reservedWrites
	overBytes := lim.Bytes > 0 && out > 0 && out+total > int64(lim.Bytes)
	overWrites := lim.Writes > 0 && writes+count > lim.Writes
	if !overBytes && !overWrites {
		return nil, nil
	}
	c.refused++
	c.eng.stats.refusedWrites.Add(1)
	var ev *SinkClogged
	if !c.clogged {
		c.clogged = true
		c.clogs++
		c.eng.stats.clogs.Add(1)
		ev = &SinkClogged{Conn: c, Outstanding: out, Writes: writes, Refused: int(total)}
	}
	if c.cfg.ClogPolicy == ClogClose && c.state != stateAborting && c.state != stateClosed {
		c.eng.stats.cloggedClosed.Add(1)
		c.abortLocked(ClosedClogged, ErrClogged)
	}
	err := fmt.Errorf("%w: %w", ErrClogged, &sink.RejectError{Sink: c.String(),
		Reason: fmt.Sprintf("clogged: %d bytes in %d writes unsent", out, writes)})
	return err, ev
}

// reportClog reports a new clog episode (outside c.mu) and has the drain
// watched so that the episode can end. It runs on the writer's goroutine
// (inside Enqueue), so the event is posted, not delivered there.
func (c *Connection) reportClog(ev *SinkClogged) {
	if ev == nil {
		return
	}
	c.box.post(delivery{to: c.events(), ev: *ev})
	c.wantPoll.Store(true)
	c.eng.arm(c)
}

// submit records ops and hands their bytes to gnet. resBytes/resWrites
// release a prepared transaction's reservation; admit says whether to check
// the threshold.
func (c *Connection) submit(ops []writeOp, closeAfter bool, resBytes int64, resWrites int, admit bool) error {
	total, count := sizeOf(ops)
	c.mu.Lock()
	c.reservedBytes -= resBytes
	c.reservedWrites -= resWrites
	if c.state != stateOpen {
		c.mu.Unlock()
		return c.closedErr()
	}
	if admit && count > 0 {
		if err, ev := c.admitLocked(total, count); err != nil {
			c.mu.Unlock()
			c.reportClog(ev)
			return err
		}
	}
	if c.tls != nil && c.tls.ok.Load() {
		// Encrypted under the lock so that records reach the socket in
		// the order crypto/tls numbered them.
		var err error
		if ops, err = c.encryptLocked(ops); err != nil {
			c.mu.Unlock()
			return err
		}
		total, _ = sizeOf(ops)
	}
	start := c.queued
	hasDone := false
	pushed := 0
	for _, op := range ops {
		if op.n == 0 && op.done == nil {
			continue // nothing to send, nobody to tell
		}
		c.queued += int64(op.n)
		c.ring.push(pendingWrite{end: c.queued, n: op.n, done: op.done, fn: op.fn, tag: op.tag})
		if op.n == 0 {
			c.flushes++
		}
		pushed++
		if op.done != nil || op.fn != nil {
			c.waiters++
			hasDone = true
		}
	}
	if total > 0 {
		if start == c.flushed.Load() {
			c.lastOut.Store(sink.Nanotime()) // output starts: the write timeout counts from now
		}
		if err := c.queueLocked(ops, total); err != nil {
			// gnet is shutting down: undo.
			c.queued = start
			for range pushed {
				w := c.ring.popBack()
				if w.done != nil || w.fn != nil {
					c.waiters--
				}
				if w.n == 0 {
					c.flushes--
				}
			}
			c.mu.Unlock()
			return fmt.Errorf("%w: %w", c.closedErr(), err)
		}
	}
	if out := c.queued - c.flushed.Load(); out > c.maxOutstanding {
		c.maxOutstanding = out
	}
	switch {
	case closeAfter:
		c.beginCloseLocked()
	case total == 0 && hasDone, c.later.len() > 0 && !c.wantPoll.Load():
		_ = c.gc.Wake(nil) // a Flush: the event loop completes it
	}
	c.mu.Unlock()
	return nil
}

// queueLocked hands the bytes of ops (total in all) to gnet as far as the
// write window and the output budget have room, and keeps the rest, by
// reference, for the event loop to hand over as room appears.
func (c *Connection) queueLocked(ops []writeOp, total int64) error {
	if c.later.len() > 0 {
		c.keepLocked(ops)
		return nil
	}
	room := c.grantLocked(total)
	if total <= room {
		if err := c.handOff(ops, total); err != nil {
			c.eng.stats.outPending.Add(-room)
			return err
		}
		return nil
	}
	var head []writeOp
	rest := ops
	for left := room; left > 0 && len(rest) > 0; {
		op := rest[0]
		if int64(op.n) <= left {
			head = append(head, op)
			left -= int64(op.n)
			rest = rest[1:]
			continue
		}
		h, t := op.split(int(left))
		head = append(head, h)
		rest = append([]writeOp{t}, rest[1:]...)
		left = 0
	}
	if len(head) > 0 {
		if err := c.handOff(head, room); err != nil {
			c.eng.stats.outPending.Add(-room)
			return err
		}
	}
	c.keepLocked(rest)
	return nil
}

// keepLocked queues ops behind the window.
func (c *Connection) keepLocked(ops []writeOp) {
	for _, op := range ops {
		if op.n > 0 {
			c.later.push(writeOp{data: op.data, bufs: op.bufs, n: op.n})
			c.laterBytes += int64(op.n)
		}
	}
}

// minShare is the output a connection may always have pending, whatever
// the socket's OutputBudget, so that every connection makes progress.
const minShare = 4 << 10

// grantLocked reserves, out of the socket's OutputBudget, how many of
// want bytes the connection may hand to gnet now: what its WriteWindow
// and the budget leave, and at least minShare when it has nothing
// pending. The caller hands that many over (or gives them back).
func (c *Connection) grantLocked(want int64) int64 {
	out := c.handed - c.flushed.Load()
	if w := int64(c.cfg.WriteWindow); w > 0 {
		want = min(want, w-out)
	}
	if want <= 0 {
		return 0
	}
	pending := &c.eng.stats.outPending
	b := int64(c.cfg.OutputBudget)
	if b <= 0 {
		pending.Add(want)
		return want
	}
	for {
		cur := pending.Load()
		grant := min(want, b-cur)
		if grant <= 0 && out == 0 {
			grant = min(want, minShare)
		}
		if grant <= 0 {
			return 0
		}
		if pending.CompareAndSwap(cur, cur+grant) {
			return grant
		}
	}
}

// handOff gives the bytes of ops to gnet (c.mu held, so hand-offs keep the
// order of their offsets, and gnet runs their callbacks in that order).
func (c *Connection) handOff(ops []writeOp, total int64) error {
	c.handed += total
	c.handoffs.push(c.handed)
	err := c.handOffBufs(ops)
	if err != nil {
		c.handoffs.popBack()
		c.handed -= total
		return err
	}
	return nil
}

// takePumpLocked takes the bytes waiting behind the window that the
// window now has room for, to be written by pump (event loop, with no
// AsyncWrite pending, so they are written at once and in order). They
// count as handed over from now on.
func (c *Connection) takePumpLocked() []writeOp {
	var ops []writeOp
	for c.later.len() > 0 {
		room := c.grantLocked(int64(c.later.front().n))
		if room <= 0 {
			break
		}
		var op writeOp
		if f := c.later.front(); int64(f.n) <= room {
			op = c.later.pop()
		} else {
			op, *f = f.split(int(room))
		}
		c.laterBytes -= int64(op.n)
		c.handed += int64(op.n)
		ops = append(ops, op)
	}
	return ops
}

// pump writes ops (from takePumpLocked) with c.mu not held, counting
// what gnet took as applied, and reports whether every write succeeded. A
// failed write makes gnet close the connection at once, on this
// goroutine: OnClose (onClose) takes c.mu and accounts for the rest, so
// the lock must not be held across a write.
func (c *Connection) pump(gc gnet.Conn, ops []writeOp) bool {
	var bufs [][]byte
	for _, op := range ops {
		bufs = bufs[:0]
		if len(op.data) > 0 {
			bufs = append(bufs, op.data)
		}
		bufs = append(bufs, op.bufs...)
		if _, err := gc.Writev(bufs); err != nil {
			return false
		}
		c.mu.Lock()
		c.applied += int64(op.n)
		c.mu.Unlock()
	}
	return true
}

func (c *Connection) handOffBufs(ops []writeOp) error {
	cb := c.writtenCB
	if len(ops) == 1 && len(ops[0].bufs) == 0 {
		return c.gc.AsyncWrite(ops[0].data, cb)
	}
	bufs := make([][]byte, 0, len(ops)+2)
	for _, op := range ops {
		if len(op.data) > 0 {
			bufs = append(bufs, op.data)
		}
		for _, b := range op.bufs {
			if len(b) > 0 {
				bufs = append(bufs, b)
			}
		}
	}
	if len(bufs) == 1 {
		return c.gc.AsyncWrite(bufs[0], cb)
	}
	return c.gc.AsyncWritev(bufs, cb)
}

// written is the AsyncWrite callback: it runs on the event loop once gnet
// has written the bytes or buffered the rest. Callbacks come in hand-off
// order, so the oldest hand-off is the one just applied.
func (c *Connection) written(gc gnet.Conn, err error) error {
	c.mu.Lock()
	end := int64(-1)
	if c.handoffs.len() > 0 {
		end = c.handoffs.pop()
	}
	if err == nil && end >= 0 {
		c.applied = end
	}
	c.mu.Unlock()
	if err != nil || end < 0 {
		return nil // the connection is closing; OnClose accounts for it
	}
	if c.readOff {
		// gnet arms reading again when it buffers output.
		c.gateReads(gc)
	}
	if c.progress(gc) {
		c.mu.Lock()
		c.closeDrainedLocked()
		c.mu.Unlock()
	}
	return nil
}

// closeDrainedLocked ends a graceful close whose output has drained.
func (c *Connection) closeDrainedLocked() {
	if c.state != stateClosing {
		return
	}
	if c.reason == 0 {
		c.reason = ClosedLocal
	}
	c.state = stateAborting
	_ = c.gc.Close()
}

// ---- event loop ----

// updateFlushedLocked learns from gnet's outbound buffer how many bytes
// have been written to the kernel. Event loop only, c.mu held.
func (c *Connection) updateFlushedLocked(gc gnet.Conn) int64 {
	out := int64(gc.OutboundBuffered())
	if fl := c.applied - out; fl > c.flushed.Load() {
		c.setFlushedLocked(fl)
		c.pollDelay = 0
	}
	return out
}

// setFlushedLocked records that the first fl bytes have been written to
// the kernel.
func (c *Connection) setFlushedLocked(fl int64) {
	if old := c.flushed.Load(); fl > old {
		c.flushed.Store(fl)
		c.eng.stats.bytesOut.Add(uint64(fl - old))
		c.eng.stats.outPending.Add(old - fl)
		now := sink.Nanotime()
		c.activity.Store(now)
		c.lastOut.Store(now)
	}
}

// completedLocked takes the write requests whose bytes are all written
// and that wait for a completion.
func (c *Connection) completedLocked(fl int64) []pendingWrite {
	var done []pendingWrite
	for c.ring.len() > 0 && c.ring.front().end <= fl {
		w := c.ring.pop()
		if w.n == 0 {
			c.flushes--
		}
		if w.done != nil || w.fn != nil {
			c.waiters--
			done = append(done, w)
		}
	}
	return done
}

// complete delivers the completions of done (c.mu not held).
func (c *Connection) complete(done []pendingWrite) {
	for _, w := range done {
		if w.fn != nil {
			w.fn(nil)
			continue
		}
		c.box.send(delivery{to: w.done, ev: SinkDrained{Conn: c, Tag: w.tag, Bytes: w.n}})
	}
}

// progress updates write progress from gnet's outbound buffer, hands over
// bytes waiting behind the window, completes the requests that are now
// flushed and says whether a graceful close may proceed. Event loop only.
func (c *Connection) progress(gc gnet.Conn) (closeNow bool) {
	c.mu.Lock()
	out := c.updateFlushedLocked(gc)
	if c.later.len() > 0 && c.handoffs.len() == 0 && (c.state == stateOpen || c.state == stateClosing) {
		if ops := c.takePumpLocked(); len(ops) > 0 {
			c.mu.Unlock()
			ok := c.pump(gc, ops)
			c.mu.Lock()
			if !ok || c.state == stateClosed {
				c.mu.Unlock()
				return false // closed: OnClose accounted for the rest
			}
		}
		out = c.updateFlushedLocked(gc)
	}
	fl := c.flushed.Load()
	done := c.completedLocked(fl)
	if c.clogged && c.unclogLocked(fl) {
		c.clogged = false
	}
	closeNow = c.state == stateClosing && c.applied >= c.closeAt && out == 0
	if closeNow && c.linger {
		closeNow = !c.startLingerLocked(gc)
	}
	poll := !closeNow && (c.state == stateClosing || (out > 0 && (c.waiters > 0 || c.clogged)) || c.later.len() > 0)
	if wt := c.cfg.WriteTimeout; !poll && out > 0 && wt > 0 {
		// No need to watch the drain closely: a visit when the write
		// timeout would pass is enough (the tick checks it).
		c.eng.armAt(c, c.lastOut.Load()+int64(wt)+1)
	}
	c.mu.Unlock()
	c.wantPoll.Store(poll)
	if poll {
		// Poll again soon while output moves, less often while it does not.
		poll := c.eng.cfg.PollInterval
		c.pollDelay = min(max(2*c.pollDelay, poll), maxDrainPolls*poll)
		c.eng.armAt(c, sink.Nanotime()+int64(c.pollDelay))
	}
	c.complete(done)
	return closeNow
}

// startLingerLocked ends a lingering close's first phase, all output
// written: it sends FIN and starts discarding input. It reports false if
// the socket cannot be half-closed (then it is closed at once).
func (c *Connection) startLingerLocked(gc gnet.Conn) bool {
	if err := shutdownWrite(gc.Fd()); err != nil {
		return false
	}
	if c.reason == 0 {
		c.reason = ClosedLocal
	}
	c.state = stateLingering
	c.lingerBy = sink.Nanotime() + int64(c.cfg.LingerTimeout)
	c.eng.stats.lingered.Add(1)
	c.eng.armAt(c, c.lingerBy)
	if c.readOff {
		// Input is discarded now: read it, whatever delivery waits for.
		if err := c.gate.set(true, false); err == nil {
			c.readOff = false
			c.stopped.Store(false)
		}
	}
	_ = gc.Wake(nil) // discard what is buffered already
	return true
}

// unclogLocked reports whether a clog episode is over: outstanding output
// is back to half the threshold.
func (c *Connection) unclogLocked(flushed int64) bool {
	lim := c.cfg.WriteThreshold
	out := c.queued - flushed
	return (lim.Bytes <= 0 || out <= int64(lim.Bytes)/2) && (lim.Writes <= 0 || c.ring.len()-c.flushes <= lim.Writes/2)
}

func (c *Connection) onTraffic(gc gnet.Conn) gnet.Action {
	if c.progress(gc) {
		c.mu.Lock()
		if c.state == stateClosing {
			if c.reason == 0 {
				c.reason = ClosedLocal
			}
			c.state = stateAborting
		}
		c.mu.Unlock()
		return gnet.Close
	}
	if c.lingering() {
		_, _ = gc.Discard(gc.InboundBuffered())
		return gnet.None
	}
	if c.tls != nil && !c.tls.ok.Load() {
		if !c.handshakeInput(gc) {
			return gnet.Close
		}
		return gnet.None
	}
	avail := gc.InboundBuffered()
	if avail > c.seen {
		c.activity.Store(sink.Nanotime())
	}
	if int64(avail) > c.maxUnread.Load() {
		c.maxUnread.Store(int64(avail))
	}
	act := c.read(gc, avail)
	if act == gnet.None {
		c.seen = gc.InboundBuffered()
		c.gateReads(gc)
	}
	return act
}

func (c *Connection) lingering() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state == stateLingering
}

// mustWait reports whether the socket must not be read for now: delivery
// waits for the reader sink or the governor, or, before StartReader, a
// read buffer's worth of bytes is waiting already.
func (c *Connection) mustWait(gc gnet.Conn) bool {
	if c.reader.Load() == nil {
		return gc.InboundBuffered() >= int(c.cfg.ReadBuffer)
	}
	return c.paused.Load()
}

// gateReads stops polling the socket for input while delivery must wait
// and resumes it when delivery goes on (InboundPause; event loop only).
// While stopped, the stop is applied again on every visit: gnet arms
// reading again when its outbound buffer drains.
func (c *Connection) gateReads(gc gnet.Conn) {
	if !c.gate.ok() {
		return
	}
	stop := c.mustWait(gc)
	if !stop && !c.readOff {
		return
	}
	if err := c.gate.set(!stop, gc.OutboundBuffered() > 0); err != nil {
		// The descriptor is gnet's and open (we are in its callback):
		// this is not expected. Fall back to MaxInbound.
		c.gate = readGate{}
		c.eng.noGate(err)
		c.readOff = false
		c.stopped.Store(false)
		return
	}
	if stop && !c.readOff {
		c.readStops.Add(1)
		c.eng.stats.readStops.Add(1)
	}
	if !stop && c.readOff {
		// Reading resumes: the quiet time while the application was
		// behind is not the peer's idleness.
		c.activity.Store(sink.Nanotime())
	}
	c.readOff = stop
	c.stopped.Store(stop)
}

// read hands buffered bytes to the reader as packets until the buffer is
// empty, the reader rejects one, or the governor says wait.
func (c *Connection) read(gc gnet.Conn, avail int) gnet.Action {
	r := c.reader.Load()
	if r == nil {
		return c.overflow(gc)
	}
	if !c.box.empty() {
		// Earlier events still wait for their sink: keep the bytes.
		c.paused.Store(true)
		c.armRetry()
		return c.overflow(gc)
	}
	if c.paused.Load() {
		if at := c.resumeAt.Load(); at > sink.Nanotime() {
			c.eng.armAt(c, at)
			return c.overflow(gc)
		}
		c.paused.Store(false)
	}
	var now time.Time
	if c.tls != nil && (c.tls.fresh.Swap(false) || c.tls.tr.Buffered() > 0) && !c.tlsDeliver(r, nil) {
		return c.overflow(gc)
	}
	for avail > 0 {
		n := min(avail, int(c.cfg.ReadBuffer))
		if c.gov != nil {
			if now.IsZero() {
				now = time.Now()
			}
			grant, wait := c.gov.Take(now, n)
			if grant == 0 {
				c.govPauses.Add(1)
				c.eng.stats.governorPauses.Add(1)
				at := sink.Nanotime() + int64(wait)
				c.resumeAt.Store(at)
				c.paused.Store(true)
				c.eng.armAt(c, at)
				break
			}
			n = grant
		}
		data := make([]byte, n)
		m, _ := gc.Read(data)
		if m <= 0 {
			break
		}
		avail -= m
		if c.tls != nil {
			c.countIn(m)
			if !c.tlsDeliver(r, data[:m]) {
				break
			}
			continue
		}
		c.seq++
		c.countIn(m)
		if !c.box.send(delivery{to: r.s, ev: Packet{Conn: c, Seq: c.seq, Data: data[:m]}}) {
			// The packet waits in the outbox; so do the bytes behind it.
			c.paused.Store(true)
			c.armRetry()
			break
		}
	}
	return c.overflow(gc)
}

// armRetry has the maintenance goroutine look at c after the current
// retry back-off.
func (c *Connection) armRetry() {
	c.eng.armAt(c, sink.Nanotime()+c.retryDelay.Load())
}

// overflow closes the connection if too many unread bytes wait.
func (c *Connection) overflow(gc gnet.Conn) gnet.Action {
	lim := int64(c.cfg.MaxInbound)
	if lim <= 0 || int64(gc.InboundBuffered()) <= lim {
		return gnet.None
	}
	c.mu.Lock()
	if c.reason == 0 {
		c.reason, c.reasonErr = ClosedOverflow, ErrInboundOverflow
	}
	c.state = stateAborting
	c.mu.Unlock()
	c.eng.stats.overflowClosed.Add(1)
	return gnet.Close
}

// onClose runs in gnet's OnClose, while gnet still holds the buffers.
func (c *Connection) onClose(gc gnet.Conn, err error) {
	c.mu.Lock()
	out := int64(gc.OutboundBuffered())
	fl := c.applied - out
	if old := c.flushed.Load(); fl > old {
		c.flushed.Store(fl)
		c.eng.stats.bytesOut.Add(uint64(fl - old))
		c.eng.stats.outPending.Add(old - fl)
	}
	c.mu.Unlock()
	if c.tls != nil {
		c.tls.tr.FeedEOF() // a handshake waiting for the peer ends now
	}
	// Bytes received and not yet taken by a reader are delivered, not lost.
	var tail []Packet
	var tailBytes int64
	for gc.InboundBuffered() > 0 {
		data := make([]byte, min(gc.InboundBuffered(), int(c.cfg.ReadBuffer)))
		m, _ := gc.Read(data)
		if m <= 0 {
			break
		}
		c.seq++
		tail = append(tail, Packet{Conn: c, Seq: c.seq, Data: data[:m]})
		tailBytes += int64(m)
	}
	if c.tls != nil {
		tail, tailBytes = c.decryptTail(tail)
	}

	c.mu.Lock()
	if !c.released {
		c.released = true
		c.eng.stats.outPending.Add(-(c.handed - c.flushed.Load()))
	}
	c.later = deque[writeOp]{}
	c.laterBytes = 0
	reason, rerr := c.reason, c.reasonErr
	if reason == 0 {
		reason, rerr = c.closeCause(err)
	}
	c.state = stateClosed
	ev := SinkClosed{Conn: c, Reason: reason, Err: rerr, Unsent: c.queued - fl}
	var failed []pendingWrite
	for c.ring.len() > 0 {
		if w := c.ring.pop(); w.done != nil || w.fn != nil {
			failed = append(failed, w)
		}
	}
	c.waiters = 0
	c.flushes = 0
	r := c.reader.Load()
	announced := c.announced
	hold := false
	if announced && r == nil && len(tail) > 0 {
		if reason == ClosedPeer || reason == ClosedError {
			// The peer sent bytes and left before the application started
			// reading: keep them for StartReader.
			hold = true
			c.tail, c.held = tail, &ev
		} else {
			ev.Unread = tailBytes
		}
	}
	c.mu.Unlock()
	c.wantPoll.Store(false)
	c.paused.Store(false)
	c.stopped.Store(false)
	if c.timerAt.Swap(0) != 0 {
		// A visit now takes the timer's place in the watch set, so that a
		// closed connection does not keep the socket busy until it is due.
		c.eng.armAt(c, sink.Nanotime())
	}

	if len(failed) > 0 {
		ferr := fmt.Errorf("%w (%s)", ErrConnClosed, reason)
		if rerr != nil {
			ferr = fmt.Errorf("%w (%s): %w", ErrConnClosed, reason, rerr)
		}
		for _, w := range failed {
			if w.fn != nil {
				w.fn(ferr)
				continue
			}
			c.box.send(delivery{to: w.done, ev: WriteFailed{Conn: c, Tag: w.tag, Bytes: w.n, Err: ferr}})
		}
	}
	if !announced {
		return
	}
	if hold {
		c.eng.hold(c)
		return
	}
	if r != nil {
		c.sendTail(r.s, tail)
		c.box.send(delivery{to: r.s, ev: ev})
		return
	}
	c.box.send(delivery{to: c.owner, ev: ev})
}

func (c *Connection) closeCause(err error) (CloseReason, error) {
	switch {
	case err == nil && c.eng.isClosing():
		return ClosedShutdown, ErrSocketClosed
	case err == nil:
		return ClosedError, ErrSocketClosed // the gnet engine stopped by itself
	case errors.Is(err, io.EOF):
		return ClosedPeer, err
	}
	return ClosedError, err
}

// ---- maintenance goroutine ----

// tick is the maintenance goroutine's visit: retry deliveries, resume a
// paused reader, poll the output drain, enforce the close deadline.
func (c *Connection) tick(now time.Time) {
	empty := c.box.drain()
	if empty {
		c.retryDelay.Store(int64(c.eng.cfg.PollInterval))
	}
	nowN := sink.Nanotime()
	if at := c.timerAt.Load(); at != 0 {
		switch {
		case at > nowN:
			c.eng.armAt(c, at)
		case c.timerAt.CompareAndSwap(at, 0):
			c.box.send(delivery{to: c.events(), ev: TimerExpired{Conn: c}})
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case stateClosed, stateAborting:
		return
	case stateLingering:
		if nowN >= c.lingerBy {
			c.abortLocked(ClosedLocal, nil)
		} else {
			c.eng.armAt(c, c.lingerBy)
		}
		return
	case stateClosing:
		if !c.closeBy.IsZero() && now.After(c.closeBy) {
			c.abortLocked(ClosedLocal, ErrCloseTimeout)
			return
		}
	}
	if wt := int64(c.cfg.WriteTimeout); wt > 0 && c.queued > c.flushed.Load() && nowN-c.lastOut.Load() > wt {
		c.eng.stats.writeTimeouts.Add(1)
		c.abortLocked(ClosedWriteTimeout, ErrWriteTimeout)
		return
	}
	wake := c.wantPoll.Load()
	if c.paused.Load() {
		switch at := c.resumeAt.Load(); {
		case !empty:
			// Still waiting for the sink (or for another goroutine
			// delivering right now): look again later.
			c.armRetry()
		case at <= sink.Nanotime():
			wake = true
		default:
			c.eng.armAt(c, at)
		}
	}
	if wake {
		_ = c.gc.Wake(nil)
	}
}

// finish is the last visit when the socket closes: deliver what the sinks
// take now, report the rest.
func (c *Connection) finish() {
	c.box.drain()
	for _, d := range c.box.discard() {
		c.eng.lost(d, fmt.Errorf("%w: sink still rejecting when the socket closed", sink.ErrRejected))
	}
}

// releaseHeld delivers a held SinkClosed to the owner when the socket
// closes and StartReader never came; the held bytes are reported as Unread.
func (c *Connection) releaseHeld() {
	c.mu.Lock()
	held, tail := c.held, c.tail
	c.held, c.tail = nil, nil
	c.mu.Unlock()
	if held == nil {
		return
	}
	for _, p := range tail {
		held.Unread += int64(len(p.Data))
	}
	c.box.send(delivery{to: c.owner, ev: *held})
	c.finish()
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
	MaxUnread   int64
	Paused      bool // delivery is paused
	ReadStopped bool // the socket is not being read
	Closed      bool
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
		Paused:         c.paused.Load(),
		ReadStopped:    c.stopped.Load(),
		Closed:         c.state == stateClosed,
	}
}

// deque is a FIFO that can also drop from its back.
type deque[T any] struct {
	buf  []T
	head int
}

func (d *deque[T]) len() int { return len(d.buf) - d.head }

func (d *deque[T]) front() *T { return &d.buf[d.head] }

func (d *deque[T]) push(v T) {
	if d.head > 0 && d.head >= len(d.buf)/2 {
		n := copy(d.buf, d.buf[d.head:])
		clear(d.buf[n:])
		d.buf, d.head = d.buf[:n], 0
	}
	d.buf = append(d.buf, v)
}

func (d *deque[T]) pushFront(v T) {
	if d.head > 0 {
		d.head--
		d.buf[d.head] = v
		return
	}
	d.buf = append(d.buf, v)
	copy(d.buf[1:], d.buf)
	d.buf[0] = v
}

func (d *deque[T]) pop() T {
	v := d.buf[d.head]
	var zero T
	d.buf[d.head] = zero
	d.head++
	if d.head == len(d.buf) {
		d.buf, d.head = d.buf[:0], 0
	}
	return v
}

func (d *deque[T]) popBack() T {
	i := len(d.buf) - 1
	v := d.buf[i]
	var zero T
	d.buf[i] = zero
	d.buf = d.buf[:i]
	if d.head == len(d.buf) {
		d.buf, d.head = d.buf[:0], 0
	}
	return v
}

// tlsDeliver decrypts ciphertext (nil: what is buffered) and delivers the
// plaintext as packets (event loop). It reports false when delivery must
// pause (the reader refused a packet, or the record layer failed).
func (c *Connection) tlsDeliver(r *sinkRef, ciphertext []byte) bool {
	ok := true
	err := c.decrypt(ciphertext, func(p []byte) {
		c.seq++
		if !c.box.send(delivery{to: r.s, ev: Packet{Conn: c, Seq: c.seq, Data: p}}) {
			ok = false // the packet waits in the outbox, and so do the ones after it
		}
	})
	if err != nil {
		c.tlsReadFailed(err)
		return false
	}
	if !ok {
		c.paused.Store(true)
		c.armRetry()
	}
	return ok
}

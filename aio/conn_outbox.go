package aio

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// This file is the producer side of a Connection: code any goroutine runs
// to queue output and to close (its state is outbox, under outbox.mu).

// outbox is a connection's producer side: its one output queue. Stage
// goroutines put write requests in (Enqueue, Write, Flush, Close); the
// event loop takes bytes out towards gnet as the write window opens and
// completes the requests gnet has written; the maintenance goroutine
// enforces its deadlines. An upper layer (http) has no queue of its own
// in front of it: it writes here directly, in order.
//
// Owner: no single goroutine. Every field after mu is guarded by mu
// (the atomics at the end are written under it, but for wantPoll, which a
// writer sets after a clog outside it), and so are
// outboxRare's but for adm; any goroutine takes it. mu is a leaf lock: while it is held the
// connection calls no code outside aio and runs no completion (those run
// after Unlock); the gnet calls made under it (AsyncWrite, Wake, Close)
// only queue work for the event loop. So a layer above may hold its own
// lock while it writes (lock order: the caller's lock, then mu), which is
// how an HTTP connection keeps its responses in order without a second
// queue.
//
// An output item is a writeOp while queued and a pendingWrite until it
// is completed; both count bytes (n), so that an item that is a file
// region rather than buffers (sendfile) fits the same window, budget,
// threshold and completion accounting.
type outbox struct {
	mu sync.Mutex

	// What every request's write reads or writes (see Connection): the
	// state, the queue and the progress of its bytes.
	state connState
	// inTraffic: the event loop is in the connection's OnTraffic,
	// delivering input, and writes the bytes queued meanwhile itself
	// when it is done (endTraffic): a response written while a request
	// is handled on the loop (the Combine path) takes no AsyncWrite, no
	// Wake and no loop task, and the responses to one read leave in one
	// writev. Writes from other goroutines meanwhile wait for it too.
	inTraffic     bool
	trafficWrites bool // something was submitted while inTraffic
	clogged       bool // the WriteThreshold refused a write; not yet drained
	// fileWait: the file segment (or in-memory bytes, tlswindow.go) at
	// the front of later waits for the engine's write poller to report
	// the socket writable (event loop).
	fileWait bool

	// The queue, by cumulative byte offsets: queued ≥ handed ≥ applied
	// ≥ flushed.
	queued     int64               // bytes accepted, ever
	ring       deque[pendingWrite] // accepted requests not yet completed, in order
	later      deque[writeOp]      // accepted, not yet handed to gnet: beyond the write window
	laterBytes int64
	handed     int64        // bytes handed to gnet, ever (queued - laterBytes)
	applied    int64        // bytes gnet wrote or buffered (AsyncWrite callbacks run)
	handoffs   deque[int64] // end offsets of AsyncWrites whose callback is due
	waiters    int          // ring entries with a completion
	flushes    int          // ring entries without bytes (Flush): not writes
	loopWrites uint64       // endTraffic's writes (ConnStats.LoopWrites)
	// maxOutstanding is the most bytes ever queued and not yet flushed.
	maxOutstanding int64

	// lastOut is the sink.Nanotime of the last output progress (or of
	// output starting). Like the rest, guarded by mu: a plain store, not
	// an atomic one (a fence on amd64, waiting for every store before
	// it: at 1024 connections, the misses of the queue just written).
	lastOut int64
	// readAt is the sink.Nanotime reading taken when input arrived, kept
	// while the event loop delivers it and writes what was written
	// meanwhile (0 otherwise): a reply written meanwhile starts its write
	// timeout from it, the loop's write records its progress at it, and
	// the packets carry it (Packet.At), instead of reading the clock
	// again. It is at most one delivery old. Written by the event loop
	// under mu (beginTraffic sets it, progressLocked and endTraffic
	// clear it); read under mu, or by the event loop without it.
	readAt int64

	// Written under mu (by the event loop, or by a producer starting
	// output), read without it by any goroutine.
	flushed  atomic.Int64 // bytes written to the kernel
	wantPoll atomic.Bool  // the maintenance goroutine must watch the drain
	// readerSet: StartReader ran (Connection.reader is set). Written
	// under mu, read by any goroutine.
	readerSet atomic.Bool
}

// outboxRare is the rest of a connection's producer side (see outbox):
// what closes, clogs, reservations and admission use, kept out of the
// lines every request touches. Every field but adm is guarded by
// outbox.mu.
type outboxRare struct {
	// Admission of the events of Enqueue, EnqueueMany and Prepare (not
	// of Write or Flush, which are not sink events); any goroutine. Every
	// event it admits is completed exactly once: Done once its bytes
	// are written to the kernel (a CloseRequest: once accepted), Cancel
	// if it is refused after admission (threshold, closed) or the
	// connection closes with it unsent. What it costs: with no
	// predicate, one atomic load per event (as the old predicate box);
	// with one, the predicate's Accept, 32 bytes per pending write for
	// its ticket, and, since an admitted write is owed a completion, the
	// drain watching a write with a Done sink always had.
	adm sink.Admission

	// The close state machine (its state is outbox.state): Open →
	// Closing (graceful: waiting for closeAt to be applied) → Lingering
	// → Aborting (gnet Close requested) → Closed (OnClose ran).
	reason    CloseReason
	reasonErr error
	closeAt   int64     // graceful close: offset that must be applied
	closeBy   time.Time // graceful close deadline (zero: none)
	linger    bool      // the graceful close lingers (see Linger)
	lingerBy  int64     // lingering close deadline (sink.Nanotime; 0: none)

	reservedBytes  int64 // held by prepared transactions
	reservedWrites int
	asyncWrites    uint64 // AsyncWrite hand-offs (ConnStats.AsyncWrites)
	released       bool   // OnClose returned the connection's share of the OutputBudget

	// The WriteThreshold's episodes.
	clogs   uint64
	refused uint64

	// The close's report to the application.
	announced bool        // the Connection event reached the application
	held      *SinkClosed // closed before StartReader with bytes waiting
	tail      []Packet
}

// pendingWrite is an accepted write request not yet known to be flushed.
type pendingWrite struct {
	end  int64 // cumulative byte offset just past the request
	n    int
	done Receiver
	fn   func(error)
	tag  any
	adm  admitted
}

// owes reports whether the request's completion is owed to someone.
func (w *pendingWrite) owes() bool { return w.done != nil || w.fn != nil || w.adm.owed() }

// writeOp is one parsed write request: data and bufs, or, if file is not
// nil, n bytes of file from offset off (a file segment, see sendfile.go).
type writeOp struct {
	data []byte
	bufs [][]byte
	file *SharedFile
	off  int64
	n    int
	done Receiver
	fn   func(error)
	tag  any
	adm  admitted
}

// admitted is the admission of the sink event a write request came from:
// its Ticket is completed exactly once (see outbox.adm). The zero value
// (no predicate installed, or not a sink event) owes nothing and costs
// nothing.
type admitted struct {
	tk sink.Ticket
	ev sink.Event
	at int64 // sink.Nanotime of the admission
}

func (a *admitted) owed() bool { return a.tk != (sink.Ticket{}) }

// admitOps admits es, whose parsed requests are ops (one per event, in
// order, but for a closing CloseRequest, which has none): it returns the
// Ticket, or the predicate's RejectError.
func (c *Connection) admitOps(es []sink.Event, ops []writeOp) (sink.Ticket, error) {
	tk, err := c.adm.AdmitMany(es)
	if err != nil || tk == (sink.Ticket{}) {
		return tk, err
	}
	now := sink.Nanotime()
	for i := range ops {
		ops[i].adm = admitted{tk: tk, ev: es[i], at: now}
	}
	return tk, nil
}

// settle completes the admission of es after submit: on failure every
// event is cancelled; on success the CloseRequest ending es (it has no
// bytes to wait for) is done.
func settle(tk sink.Ticket, es []sink.Event, closeAfter bool, err error) {
	if tk == (sink.Ticket{}) {
		return
	}
	if err != nil {
		for _, e := range es {
			tk.Cancel(e)
		}
		return
	}
	if closeAfter {
		tk.Done(es[len(es)-1], 0, 0)
	}
}

// split returns the first k bytes of op (0 < k < op.n) and the rest; the
// completion stays with the rest.
func (op writeOp) split(k int) (head, tail writeOp) {
	head.n, tail.n = k, op.n-k
	tail.done, tail.fn, tail.tag, tail.adm = op.done, op.fn, op.tag, op.adm
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
	// One event: admitted here rather than by admitOps, whose slice
	// would cost an allocation per write.
	tk, err := c.adm.Admit(e)
	if err != nil {
		return err
	}
	owed := tk != (sink.Ticket{})
	if owed && len(ops) == 1 {
		ops[0].adm = admitted{tk: tk, ev: e, at: sink.Nanotime()}
	}
	err = c.submit(ops, closeAfter, 0, 0, true)
	switch {
	case !owed:
	case err != nil:
		tk.Cancel(e)
	case closeAfter:
		tk.Done(e, 0, 0)
	}
	return err
}

// EnqueueMany queues all of es or none of them. A CloseRequest may only
// come last.
func (c *Connection) EnqueueMany(es []sink.Event) error {
	ops, closeAfter, err := parseWrites(es)
	if err != nil {
		return err
	}
	tk, err := c.admitOps(es, ops)
	if err != nil {
		return err
	}
	err = c.submit(ops, closeAfter, 0, 0, true)
	settle(tk, es, closeAfter, err)
	return err
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
	tk, err := c.admitOps(es, ops)
	if err != nil {
		return nil, err
	}
	total, count := sizeOf(ops)
	c.mu.Lock()
	if c.state != stateOpen {
		c.mu.Unlock()
		err := c.closedErr()
		settle(tk, es, closeAfter, err)
		return nil, err
	}
	if count > 0 {
		if err, ev := c.admitLocked(total, count); err != nil {
			c.mu.Unlock()
			c.reportClog(ev)
			settle(tk, es, closeAfter, err)
			return nil, err
		}
	}
	c.reservedBytes += total
	c.reservedWrites += count
	c.mu.Unlock()
	return &connTxn{c: c, es: es, tk: tk, ops: ops, closeAfter: closeAfter, bytes: total, writes: count}, nil
}

type connTxn struct {
	c          *Connection
	es         []sink.Event
	tk         sink.Ticket
	ops        []writeOp
	closeAfter bool
	bytes      int64
	writes     int
	once       sync.Once
}

func (t *connTxn) Commit() {
	t.once.Do(func() {
		err := t.c.submit(t.ops, t.closeAfter, t.bytes, t.writes, false)
		settle(t.tk, t.es, t.closeAfter, err)
		if err != nil {
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
		settle(t.tk, t.es, t.closeAfter, sink.ErrRejected)
	})
}

// Len is the number of write requests not yet completed.
func (c *Connection) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ring.len()
}

// SetPredicate installs an admission predicate run on every enqueued
// event (nil: none), bound to c first if it is a sink.Binder. A
// predicate that counts what it admitted (sink.Completer, sink.Canceler)
// gets each event back once: done when its bytes are written to the
// kernel, cancelled if the connection refuses it after all or closes
// with it unsent.
func (c *Connection) SetPredicate(p sink.Predicate) { c.adm.SetPredicate(c, p) }

// Predicate returns the installed predicate, or nil.
func (c *Connection) Predicate() sink.Predicate { return c.adm.Predicate() }

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
//
// Write, Close, Linger, Abort, Closing and Len take only the outbox's
// leaf lock and never call done (or anything outside aio) on the
// caller's goroutine, so a protocol layer may call them while holding its
// own lock: that is how it keeps its writes in order without a queue of
// its own in front of this one (lock order: the caller's lock, then the
// outbox's).
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

// Closing reports whether the connection's output is closing or closed:
// a graceful close or a lingering one was asked for (Close, Linger, a
// CloseRequest), it was aborted, or it closed. Writes fail from then on.
func (c *Connection) Closing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state != stateOpen
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
	if resBytes != 0 || resWrites != 0 {
		// A prepared transaction's: the reservations live in outboxRare,
		// a line a plain write (every reply) does not touch.
		c.reservedBytes -= resBytes
		c.reservedWrites -= resWrites
	}
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
		if op.n == 0 && op.done == nil && op.fn == nil && !op.adm.owed() {
			continue // nothing to send, nobody to tell
		}
		c.queued += int64(op.n)
		w := pendingWrite{end: c.queued, n: op.n, done: op.done, fn: op.fn, tag: op.tag, adm: op.adm}
		c.ring.push(w)
		if op.n == 0 {
			c.flushes++
		}
		pushed++
		if w.owes() {
			c.waiters++
			hasDone = true
		}
	}
	if total > 0 {
		if start == c.flushed.Load() {
			// Output starts: the write timeout counts from now.
			at := c.readAt
			if at == 0 {
				at = sink.Nanotime()
			}
			c.lastOut = at
		}
		if err := c.queueLocked(ops, total); err != nil {
			// gnet is shutting down: undo.
			c.queued = start
			for range pushed {
				w := c.ring.popBack()
				if w.owes() {
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
	if c.inTraffic {
		// The event loop writes and completes them when the traffic it
		// handles now is done (endTraffic): no Wake.
		c.trafficWrites = true
	}
	switch {
	case closeAfter:
		c.beginCloseLocked()
	case c.inTraffic:
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
	if c.inTraffic {
		c.keepLocked(ops) // the event loop writes them at endTraffic
		return nil
	}
	if c.later.len() > 0 {
		c.keepLocked(ops)
		_ = c.gc.Wake(nil) // the event loop writes them now, not at the next drain poll
		return nil
	}
	if firstFileOp(ops) >= 0 {
		// A file segment is sent by the event loop, after the bytes
		// before it, which it writes itself, corked with the segment
		// (a header and its body leave in one go): all of them wait
		// behind the window, and the loop is woken.
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
			c.later.push(writeOp{data: op.data, bufs: op.bufs, file: op.file, off: op.off, n: op.n})
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
	c.asyncWrites++
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

// handOffBufs hands ops to gnet in one AsyncWrite(v).
func (c *Connection) handOffBufs(ops []writeOp) error {
	cb := c.writtenCB
	if len(ops) == 1 && len(ops[0].bufs) == 0 {
		return c.gc.AsyncWrite(ops[0].data, cb)
	}
	bufs := make([][]byte, 0, len(ops)+2)
	for _, op := range ops {
		bufs = appendJoined(bufs, op.data)
		for _, b := range op.bufs {
			bufs = appendJoined(bufs, b)
		}
	}
	if len(bufs) == 1 {
		return c.gc.AsyncWrite(bufs[0], cb)
	}
	return c.gc.AsyncWritev(bufs, cb)
}

// written is the AsyncWrite callback: it runs on the event loop once gnet
// has written the bytes or buffered the rest. Callbacks come in hand-off

// appendJoined appends b to bufs, joined to the last piece if b continues
// it in the same array (a TLS write's records, split among its ops).
func appendJoined(bufs [][]byte, b []byte) [][]byte {
	if len(b) == 0 {
		return bufs
	}
	if k := len(bufs) - 1; k >= 0 {
		last := bufs[k]
		if n := len(last); n < cap(last) && &last[:n+1][n] == &b[0] && cap(last)-n >= len(b) {
			bufs[k] = last[:n+len(b)]
			return bufs
		}
	}
	return append(bufs, b)
}

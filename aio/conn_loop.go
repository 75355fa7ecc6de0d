package aio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/sandstorm-go/sandstorm/sink"
)

// This file is the event loop's side of a Connection (loopState): gnet's
// callbacks for it, and the code they run.

// takePumpLocked takes the bytes waiting behind the window, up to the
// first file segment, that the window now has room for, to be written by pump (event loop, with no
// AsyncWrite pending, so they are written at once and in order). They
// count as handed over from now on.
func (c *Connection) takePumpLocked() []writeOp {
	sc := c.scratch()
	ops := sc.ops[:0]
	for c.later.len() > 0 && c.later.front().file == nil {
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
	if len(ops) > 0 {
		sc.ops = nil // taken until pump gives it back
	}
	return ops
}

// pump writes ops (from takePumpLocked) with c.mu not held, in one
// write or writev, and returns how many bytes gnet took (the caller
// counts them as applied once it holds c.mu again) and whether the
// write succeeded. A failed write makes gnet close the
// connection at once, on this goroutine: OnClose (onClose) takes c.mu
// and accounts for the rest, so the lock must not be held across a write.
//
// corked says a file segment follows ops: their bytes are written
// straight to the socket, flagged as more to come, when gnet's buffer is
// empty (see writeCorked), so that a header leaves with the start of its
// body.
//
// ops and the pieces gathered are kept for the next pump (event loop
// only), cleared so that they hold no response's memory.
func (c *Connection) pump(gc gnet.Conn, ops []writeOp, corked bool) (int64, bool) {
	sc := c.scratch()
	bufs := sc.bufs[:0]
	sc.bufs = nil
	var n int64
	for _, op := range ops {
		if len(op.data) > 0 {
			bufs = append(bufs, op.data)
		}
		bufs = append(bufs, op.bufs...)
		n += int64(op.n)
	}
	clear(ops)
	sc.ops = ops[:0]
	all := bufs
	if corked && gc.OutboundBuffered() == 0 {
		bufs = writeCorked(gc, bufs)
	}
	var err error
	switch len(bufs) {
	case 0:
	case 1:
		_, err = gc.Write(bufs[0])
	default:
		_, err = gc.Writev(bufs)
	}
	clear(all)
	sc.bufs = all[:0]
	if err != nil {
		return 0, false
	}
	return n, true
}

// endTraffic ends the delivery of input that beginTraffic started: the
// bytes written meanwhile are written now, on the event loop (progress).
// It reports whether the connection must close (its graceful close is
// done).
func (c *Connection) endTraffic(gc gnet.Conn) (closeNow bool) {
	c.mu.Lock()
	c.inTraffic = false
	pending := c.trafficWrites
	c.trafficWrites = false
	if !pending {
		c.readAt = 0
		c.mu.Unlock()
		return false
	}
	c.loopWrites++
	closeNow, _ = c.progressLocked(gc) // under the same lock: one lock per request less
	return closeNow
}

// beginTraffic marks the event loop as delivering the connection's input
// (see outbox.inTraffic). A TLS connection's records, sealed by submit,
// are written the same way (docs/tls.md, "2026-11-27 11:30").
func (c *Connection) beginTraffic(readAt int64) bool {
	c.mu.Lock()
	c.inTraffic = c.state == stateOpen
	on := c.inTraffic
	if on {
		c.readAt = readAt // cleared by endTraffic
	}
	c.mu.Unlock()
	return on
}

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
		c.countOut(fl - old)
		c.eng.stats.outPending.Add(old - fl)
		now := c.readAt // the event loop's delivery: its arrival reading
		if now == 0 {
			now = sink.Nanotime()
		}
		c.noteActivity(now)
		c.lastOut = now
	}
}

// noteActivity records progress in or out at now (sink.Nanotime) for
// the idle timeout, to within activityGrain: an atomic store is a fence
// on amd64, waiting for every store before it (at 1024 connections, the
// misses of the lines just written), so one that would move activity by
// less is skipped, and closeIdle allows for the lag.
func (c *Connection) noteActivity(now int64) {
	if d := now - c.activity.Load(); d > 0 && d >= activityGrain(c.cfg.IdleTimeout) {
		c.activity.Store(now)
	}
}

// activityGrain is how far Connection.activity may lag the last
// progress under an idle timeout of idle: a 64th of it, at most 100 ms
// (0 without one: every progress is stored).
func activityGrain(idle time.Duration) int64 {
	return min(int64(idle)/64, int64(100*time.Millisecond))
}

// completedLocked takes the write requests whose bytes are all written
// and that wait for a completion.
// The slice is the loop's scratch (loopScratch.done), taken until
// complete gives it back: a completion that leads to another progress
// meanwhile gets a new one.
func (c *Connection) completedLocked(fl int64) []pendingWrite {
	sc := c.scratch()
	done := sc.done[:0]
	sc.done = nil
	for c.ring.len() > 0 && c.ring.front().end <= fl {
		w := c.ring.pop()
		if w.n == 0 {
			c.flushes--
		}
		if w.owes() {
			c.waiters--
			done = append(done, w)
		}
	}
	return done
}

// complete delivers the completions of done (c.mu not held).
func (c *Connection) complete(done []pendingWrite) {
	var now int64
	for _, w := range done {
		if w.adm.owed() {
			if now == 0 {
				now = sink.Nanotime()
			}
			w.adm.tk.Done(w.adm.ev, time.Duration(now-w.adm.at), 0)
		}
		switch {
		case w.fn != nil:
			w.fn(nil)
		case w.done != nil:
			c.box.send(delivery{to: w.done, ev: SinkDrained{Conn: c, Tag: w.tag, Bytes: w.n}})
		}
	}
	clear(done)
	c.scratch().done = done[:0]
}

// scratch returns the loopScratch of c's event loop (c's own before it
// has one). Event loop only.
func (c *Connection) scratch() *loopScratch {
	if t := c.traffic; t != nil {
		return &t.scratch
	}
	return &c.own
}

// progress updates write progress from gnet's outbound buffer, hands over
// bytes waiting behind the window, completes the requests that are now
// flushed and says whether a graceful close may proceed. Event loop only.
func (c *Connection) progress(gc gnet.Conn) (closeNow bool) {
	c.mu.Lock()
	closeNow, _ = c.progressLocked(gc)
	return closeNow
}

// progressLocked is progress with c.mu held; it unlocks it. It also
// reports whether the connection is lingering after it (onTraffic's
// question, answered under the same lock).
func (c *Connection) progressLocked(gc gnet.Conn) (closeNow, lingering bool) {
	out := c.updateFlushedLocked(gc)
	if c.later.len() > 0 && c.handoffs.len() == 0 && (c.state == stateOpen || c.state == stateClosing) {
		var fileBytes int64
		for {
			var pumped int64
			if ops := c.takePumpLocked(); len(ops) > 0 {
				corked := c.later.len() > 0 && c.later.front().file != nil
				c.mu.Unlock()
				n, ok := c.pump(gc, ops, corked)
				c.mu.Lock()
				c.applied += n
				pumped = n
				if !ok || c.state == stateClosed {
					c.mu.Unlock()
					return false, false // closed: OnClose accounted for the rest
				}
			}
			// A write handed off (AsyncWritev) while c.mu was released
			// around the pump, flush or sendfile goes first: anything
			// taken from later now would overtake it. Its completion
			// (written) comes back here.
			if c.later.len() == 0 || c.handoffs.len() > 0 || c.state != stateOpen && c.state != stateClosing {
				break
			}
			if c.later.front().file == nil {
				if !c.pumpAgainLocked(gc, pumped, &fileBytes) { // tlswindow.go
					break
				}
				continue
			}
			if fileBytes >= fileSendCap {
				_ = gc.Wake(nil) // let the loop serve the others; go on afterwards
				break
			}
			if !c.sendFileLocked(gc, &fileBytes) {
				break
			}
		}
		if c.state == stateClosed {
			c.mu.Unlock()
			return false, false
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
	poll := !closeNow && (c.state == stateClosing || (out > 0 && (c.waiters > 0 || c.clogged)) || c.later.len() > 0 && !c.fileWait)
	if wt := c.cfg.WriteTimeout; !poll && (out > 0 || c.fileWait) && wt > 0 {
		// No need to watch the drain closely: a visit when the write
		// timeout would pass is enough (the tick checks it).
		c.eng.armAt(c, c.lastOut+int64(wt)+1)
	}
	lingering = c.state == stateLingering
	// Stored under c.mu: a writer that clogs the connection after this
	// (under c.mu too) sets wantPoll after it (reportClog), never before.
	if c.wantPoll.Load() != poll { // usually unchanged: no fence
		c.wantPoll.Store(poll)
	}
	c.readAt = 0 // the traffic's writes are done (endTraffic)
	c.mu.Unlock()
	if poll {
		// Poll again soon while output moves, less often while it does not.
		poll := c.eng.cfg.PollInterval
		c.pollDelay = min(max(2*c.pollDelay, poll), maxDrainPolls*poll)
		c.eng.armAt(c, sink.Nanotime()+int64(c.pollDelay))
	}
	c.complete(done)
	return closeNow, lingering
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
	c.mu.Lock()
	closeNow, lingering := c.progressLocked(gc)
	if closeNow {
		return c.closeDrained()
	}
	if lingering {
		_, _ = gc.Discard(gc.InboundBuffered())
		return gnet.None
	}
	c.announceIfDone()
	if c.tls != nil && !c.tls.ok.Load() {
		// An announce from here goes through loopAnnounce: a reader started
		// during it needs no wake-up, the loop delivers below.
		if !c.handshakeInput(gc) {
			return gnet.Close
		}
		if !c.tls.ok.Load() || c.loadReader() == nil {
			return gnet.None
		}
		// The handshake ended here (its last step ran on the loop) and the
		// application started reading when it was announced: the records
		// that came with its end are delivered now, without a wake-up.
	}
	avail := gc.InboundBuffered()
	var now int64 // the arrival reading of new input (0: none)
	if avail > c.seen {
		now = sink.Nanotime()
		c.noteActivity(now)
	}
	if int64(avail) > c.maxUnread.Load() {
		c.maxUnread.Store(int64(avail))
	}
	traffic := c.beginTraffic(now)
	act := c.read(gc, avail)
	drained := traffic && c.endTraffic(gc)
	if drained && act == gnet.None {
		return c.closeDrained()
	}
	if act == gnet.None {
		c.seen = gc.InboundBuffered()
		c.gateReads(gc)
	}
	return act
}

// closeDrained is OnTraffic's answer once progress found a graceful
// close drained: the connection closes.
func (c *Connection) closeDrained() gnet.Action {
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

// mustWait reports whether the socket must not be read for now: delivery
// waits for the reader sink or the governor, or, before StartReader, a
// read buffer's worth of bytes is waiting already.
func (c *Connection) mustWait(gc gnet.Conn) bool {
	if c.loadReader() == nil {
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
	r := c.loadReader()
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
	borrower, lend := r.(PacketBorrower)
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
		if c.tls != nil {
			// The ciphertext is decrypted where it lies in gnet's buffer
			// (the session copies only a record cut short) and discarded
			// once delivered: no allocation per read.
			data, _ := gc.Peek(n)
			if len(data) == 0 {
				break
			}
			avail -= len(data)
			c.countIn(len(data))
			ok := c.tlsDeliver(r, data)
			_, _ = gc.Discard(len(data))
			if !ok {
				break
			}
			continue
		}
		if lend {
			// The borrower is lent a view of gnet's buffer, discarded once
			// it returns: no allocation and no copy per packet.
			data, _ := gc.Peek(n)
			if len(data) == 0 {
				break
			}
			avail -= len(data)
			c.seq++
			c.countIn(len(data))
			ok := c.box.lendPacket(borrower, Packet{Conn: c, Seq: c.seq, Data: data, At: c.readAt})
			_, _ = gc.Discard(len(data))
			if !ok {
				c.paused.Store(true)
				c.armRetry()
				break
			}
			continue
		}
		data := make([]byte, n)
		m, _ := gc.Read(data)
		if m <= 0 {
			break
		}
		avail -= m
		c.seq++
		c.countIn(m)
		if !c.box.sendPacket(r, Packet{Conn: c, Seq: c.seq, Data: data[:m], At: c.readAt}) {
			// The packet waits in the postbox; so do the bytes behind it.
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
		c.countOut(fl - old)
		c.eng.stats.outPending.Add(old - fl)
	}
	c.recycleSealedLocked()
	c.mu.Unlock()
	if c.tls != nil {
		c.tls.ended() // a handshake waiting for the peer ends now
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
	c.forgetWritable(gc)
	c.releaseFilesLocked()
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
		if w := c.ring.pop(); w.owes() {
			failed = append(failed, w)
		}
	}
	c.waiters = 0
	c.flushes = 0
	r := c.loadReader()
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
	if c.timerAt.Swap(0) != 0 || c.tls != nil {
		// A visit now takes the timer's (or the TLS handshake deadline's)
		// place in the watch set, so that a closed connection does not
		// keep the socket busy until it is due: Shutdown waits for an
		// empty watch set, and a handshake the peer left would hold it for
		// HandshakeTimeout.
		c.eng.armAt(c, sink.Nanotime())
	}

	if len(failed) > 0 {
		ferr := fmt.Errorf("%w (%s)", ErrConnClosed, reason)
		if rerr != nil {
			ferr = fmt.Errorf("%w (%s): %w", ErrConnClosed, reason, rerr)
		}
		for _, w := range failed {
			if w.adm.owed() {
				w.adm.tk.Cancel(w.adm.ev)
			}
			switch {
			case w.fn != nil:
				w.fn(ferr)
			case w.done != nil:
				c.box.send(delivery{to: w.done, ev: WriteFailed{Conn: c, Tag: w.tag, Bytes: w.n, Err: ferr}})
			}
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
		c.sendTail(r, tail)
		c.box.send(delivery{to: r, ev: ev})
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

// tlsDeliver decrypts ciphertext (nil: what is buffered) and delivers the
// plaintext as packets (event loop): lent to a PacketBorrower (the
// plaintext lies in a pooled record buffer, reused once it returns; the
// postbox copies a packet that must wait), a copy to any other reader.
// It reports false when delivery must pause (the reader refused a
// packet, or the record layer failed).
func (c *Connection) tlsDeliver(r Receiver, ciphertext []byte) bool {
	ok := true
	borrower, lend := r.(PacketBorrower)
	err := c.decrypt(ciphertext, func(p []byte) {
		c.seq++
		pk := Packet{Conn: c, Seq: c.seq, Data: p, At: c.readAt}
		if lend {
			ok = c.box.lendPacket(borrower, pk) && ok
			return
		}
		pk.Data = bytes.Clone(p)
		ok = c.box.sendPacket(r, pk) && ok
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

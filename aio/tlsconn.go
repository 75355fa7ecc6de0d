package aio

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// This file wires a tlsSession into a Connection (thesis ch. 5 §7): the
// handshake runs on the handshake stage before the application sees the
// connection; afterwards packets are decrypted inline as they arrive and
// every write is encrypted on the connection's normal output path, so the
// one owner of the output (the Connection) still holds the write window,
// completions and close policy.

// maxHandshakeInput bounds the ciphertext buffered for a handshake in
// progress: a peer that sends more before finishing it is closed.
const maxHandshakeInput = 256 << 10

// tlsServer is a socket's TLS side (server or client).
type tlsServer struct {
	client bool
	cfg    *tls.Config
	store  *CertStore
	hs     *Handshakes
}

func newTLSServer(cfg SocketConfig, m *stage.Manager) (*tlsServer, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: a TLS socket needs an Env.Manager (its handshake stage)", ErrInvalidConfig)
	}
	tc, store, err := cfg.TLS.serverConfig()
	if err != nil {
		return nil, err
	}
	hs, err := TLSHandshakes(m, *cfg.TLS)
	if err != nil {
		return nil, err
	}
	return &tlsServer{cfg: tc, store: store, hs: hs}, nil
}

func newTLSClient(cfg SocketConfig, m *stage.Manager) (*tlsServer, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: a TLS socket needs an Env.Manager (its handshake stage)", ErrInvalidConfig)
	}
	hs, err := TLSHandshakes(m, *cfg.TLS)
	if err != nil {
		return nil, err
	}
	return &tlsServer{client: true, cfg: cfg.TLS.clientConfig(), hs: hs}, nil
}

// startTLS begins the handshake of a new connection (event loop, from
// OnOpen): the connection reaches the application only once the handshake
// succeeded. A server waits for the ClientHello (handshakeInput); a
// client's first step is queued at once. The connection's timer closes it
// at HandshakeTimeout. startTLS reports false if the handshake stage
// refused the connection, which must then be closed.
func (c *Connection) startTLS(ts *tlsServer, announce func(), failed func(error)) bool {
	cfg := ts.cfg
	if ts.client && cfg.ServerName == "" && !cfg.InsecureSkipVerify {
		cfg = cfg.Clone()
		cfg.ServerName = c.dialHost
	}
	s := newTLSSession(!ts.client, cfg, c.local, c.remote, c.writeHandshake)
	s.hs = ts.hs
	s.done = func(err error) {
		if err != nil {
			c.eng.log.Debug("aio: TLS handshake failed", "conn", c.String(), "err", err)
			c.closeWith(ClosedError, err)
			if failed != nil {
				failed(err)
			}
			return
		}
		c.announceOnLoop()
	}
	s.announce = announce
	s.deadline = sink.Nanotime() + int64(ts.hs.cfg.HandshakeTimeout)
	c.mu.Lock() // Close (sendCloseNotify) may run already: c is in the table
	c.tls = s
	c.mu.Unlock()
	c.eng.armAt(c, s.deadline)
	if ts.client {
		return c.submitHandshake()
	}
	return true
}

// announceOnLoop has the event loop hand the connection to the
// application (the handshake goroutine, once the handshake succeeded).
// The announcement must not race with onClose: a connection that the
// peer closed while its handshake ended (a client that closes right after
// its Finished) gets its SinkClosed only if it was announced, and only
// after its announcement, which onClose cannot order from another
// goroutine (the Connection event goes through the server's postbox, the
// SinkClosed through the connection's). On the event loop either the
// announcement comes first and onClose follows, or the connection is
// closed already and announce skips it.
func (c *Connection) announceOnLoop() {
	c.tls.announcing.Store(true)
	if c.tls.stepOnLoop {
		// The last step ran on the event loop (handshakeInput), which
		// announces when it returns: no wake-up needed.
		return
	}
	if c.tls.hs != nil {
		c.tls.hs.counter.announceWakes.Add(1)
	}
	c.mu.Lock()
	closed := c.state == stateClosed
	var err error
	if !closed {
		err = c.gc.Wake(nil) // onTraffic announces
	}
	c.mu.Unlock()
	if err != nil && c.tls.announcing.Swap(false) {
		c.tls.announce() // the event loop is gone: nothing can race
	}
}

// announceIfDone runs the announcement a completed handshake left for the
// event loop (onTraffic).
func (c *Connection) announceIfDone() {
	if c.tls != nil && c.tls.announcing.Swap(false) {
		c.loopAnnounce(c.tls.announce)
	}
}

// submitHandshake queues the handshake's first step (event loop).
func (c *Connection) submitHandshake() bool {
	s := c.tls
	s.submitted = true
	if err := s.hs.submit(s, s.done); err != nil {
		c.eng.log.Debug("aio: TLS handshake refused", "conn", c.String(), "err", err)
		return false
	}
	return true
}

// writeHandshake sends the handshake's own records (the handshake
// goroutine; nothing else writes before the session is established):
// straight to the socket if it takes them (tlsflight.go), the rest
// through the outbox.
func (c *Connection) writeHandshake(b []byte) error {
	if b = c.writeFlightDirect(b); len(b) == 0 {
		return nil
	}
	if c.tls.hs != nil {
		c.tls.hs.counter.flightsQueued.Add(1)
	}
	op := [1]writeOp{{data: b, n: len(b)}}
	return c.submit(op[:], false, 0, 0, false)
}

// handshakeInput moves every buffered byte to the handshake (event loop).
// Before the first step it checks that the bytes are a ClientHello and
// queues the step once it is whole. It reports false when the connection
// must close (not TLS, too much input, refused), the reason counted.
func (c *Connection) handshakeInput(gc interface {
	InboundBuffered() int
	Read([]byte) (int, error)
}) bool {
	s := c.tls
	if gc.InboundBuffered() > 0 {
		// Feed copies: read through a borrowed record-sized buffer.
		p := getPlainBuf()
		buf := (*p)[:cap(*p)]
		for gc.InboundBuffered() > 0 {
			m, _ := gc.Read(buf)
			if m <= 0 {
				break
			}
			c.countIn(m)
			s.tr.Feed(buf[:m])
		}
		putPlainBuf(p)
	}
	if s.ok.Load() {
		c.announceIfDone() // the last step ran here (resume)
		return true
	}
	if s.submitted {
		if s.tr.Buffered() > maxHandshakeInput {
			c.closeTLSInput(ClosedOverflow, ErrInboundOverflow)
			return false
		}
		return true
	}
	var whole bool
	var err error
	s.tr.inspect(func(in []byte) {
		whole, err = clientHelloStatus(in)
		if err == nil && !whole && len(in) > maxClientHelloInput {
			err = fmt.Errorf("%w: %d bytes and no whole ClientHello", errNotTLS, len(in))
		}
	})
	switch {
	case err != nil:
		s.settle(err)
		c.closeTLSInput(ClosedError, err)
		return false
	case !whole:
		return true
	case !c.submitHandshake():
		c.eng.stats.rejectedAccepts.Add(1)
		c.closeTLSInput(ClosedLocal, ErrHandshakeRefused)
		return false
	}
	return true
}

// closeTLSInput records why the event loop closes a connection whose
// handshake input was refused.
func (c *Connection) closeTLSInput(r CloseReason, err error) {
	c.mu.Lock()
	if c.reason == 0 {
		c.reason, c.reasonErr = r, err
	}
	c.state = stateAborting
	c.mu.Unlock()
}

// tlsHandshakeExpired closes the connection if its handshake is past its
// deadline (the maintenance goroutine's visit), and re-arms the timer if
// it is still to come. A handshake that completed has no deadline left,
// even while its last flight is still leaving (a closed connection whose
// handshake completed is then not kept in the watch set until it).
func (c *Connection) tlsHandshakeExpired(now int64) bool {
	s := c.tls
	if s.ok.Load() || s.completed.Load() || s.settled.Load() || s.deadline == 0 {
		return false
	}
	if now < s.deadline {
		c.eng.armAt(c, s.deadline)
		return false
	}
	if !s.expire() {
		return false
	}
	c.eng.log.Debug("aio: TLS handshake timed out", "conn", c.String())
	c.closeWith(ClosedError, errHandshakeTimeout)
	return true
}

// recycleSealedLocked gives back, at close, the sealed buffers gnet has
// taken (c.mu held): no later write would (encryptLocked recycles them
// otherwise), and a connection that closes after one response, as most
// full handshakes' do, left its buffers to the garbage collector.
// Buffers not yet applied stay with gnet's queued writes.
func (c *Connection) recycleSealedLocked() {
	if c.tls != nil {
		c.tls.sent.recycle(c.applied)
	}
}

// decrypt feeds ciphertext to the session (which keeps none of it: what
// is left of a record cut short is copied) and hands each plaintext piece
// to deliver, lent: it is valid only during the call (a pooled record
// buffer), and deliver copies what it keeps. io.EOF means the peer sent
// close_notify.
func (c *Connection) decrypt(ciphertext []byte, deliver func([]byte)) error {
	var err error
	if len(ciphertext) > 0 {
		err = c.tls.feed(ciphertext, deliver)
	} else {
		err = c.tls.drain(deliver)
	}
	if c.tls.hasPending() { // an alert or a key update answer
		_ = c.submit(nil, false, 0, 0, false)
	}
	return err
}

// tlsReadFailed closes a connection whose record layer failed.
func (c *Connection) tlsReadFailed(err error) {
	if errors.Is(err, io.EOF) {
		c.closeWith(ClosedPeer, nil) // close_notify: a clean end
		return
	}
	c.closeWith(ClosedError, fmt.Errorf("aio: TLS: %w", err))
}

// encryptLocked turns ops' plaintext into records, in order, after any
// records the read side produced (alerts), keeping each op's completion.
// The plaintext of all ops is sealed at once, in full records, into one
// buffer (seal); each op gets the ciphertext up to the end of the record that
// holds its last byte (so its completion still waits for all of its
// bytes), the first op the records before its own, the last one any that
// followed. An op whose bytes all share a record with the op before has
// none left (and completes with the op before).
//
// The buffer the records are sealed into is pooled: it is given back
// once the event loop has handed its last byte to gnet (c.applied), which
// writes or copies what it is handed.
func (c *Connection) encryptLocked(ops []writeOp) ([]writeOp, error) {
	s := c.tls
	s.sent.recycle(c.applied)
	cipher, ends, err := s.seal(ops)
	if err != nil {
		return nil, fmt.Errorf("aio: TLS: %w", err)
	}
	if len(cipher) == 0 {
		putCipherBuf(cipher)
	} else {
		s.sent.add(cipher, c.queued+int64(len(cipher)))
	}
	// The result lives in a slice the session keeps: submit is done with
	// it before it lets go of the lock. The references the last result
	// holds are dropped here, and a slice grown beyond keepOps goes.
	clear(s.outOps)
	if cap(s.outOps) > keepOps {
		s.outOps = nil
	}
	out := s.outOps[:0]
	last := -1 // the last op with plaintext
	for i, op := range ops {
		if op.n > 0 {
			last = i
		}
	}
	if last < 0 && len(cipher) > 0 {
		out = append(out, writeOp{data: cipher, n: len(cipher)})
	}
	sealed, plainEnd := 0, 0 // ciphertext given to ops so far; plaintext seen
	for i, op := range ops {
		if op.n > 0 {
			plainEnd += op.n
			end := len(cipher)
			if i != last && ends != nil {
				end = ends[(plainEnd-1)/maxPlaintext]
			} else if i != last {
				end = sealed // ends unknown: the last op carries all
			}
			op.data, op.bufs, op.n = cipher[sealed:end], nil, end-sealed
			sealed = end
		}
		out = append(out, op)
	}
	s.outOps = out
	return out, nil
}

// keepOps bounds the length of the slice encryptLocked keeps for its
// results.
const keepOps = 64

// eachPiece calls f with every non-empty piece of ops' bytes, in order.
func eachPiece(ops []writeOp, f func([]byte)) {
	for _, op := range ops {
		if len(op.data) > 0 {
			f(op.data)
		}
		for _, b := range op.bufs {
			if len(b) > 0 {
				f(b)
			}
		}
	}
}

// sendCloseNotify queues the close_notify alert before a graceful close.
func (c *Connection) sendCloseNotify() {
	c.mu.Lock()
	s := c.tls
	c.mu.Unlock()
	if s == nil || !s.ok.Load() {
		return
	}
	if s.closeNotify() == nil {
		_ = c.submit(nil, false, 0, 0, false)
	}
}

// TLSState returns the negotiated TLS parameters, and false for a
// connection without TLS or whose handshake has not completed.
func (c *Connection) TLSState() (tls.ConnectionState, bool) {
	if c.tls == nil || !c.tls.ok.Load() {
		return tls.ConnectionState{}, false
	}
	return c.tls.state(), true
}

// decryptTail turns the ciphertext left at close into plaintext packets
// (records cut short by the close are dropped: they cannot be read).
func (c *Connection) decryptTail(raw []Packet) ([]Packet, int64) {
	if !c.tls.ok.Load() {
		return nil, 0
	}
	var tail []Packet
	var n int64
	seq := c.seq - uint64(len(raw))
	for _, p := range raw {
		_ = c.tls.feed(p.Data, func(pt []byte) {
			seq++
			tail = append(tail, Packet{Conn: c, Seq: seq, Data: append([]byte(nil), pt...)})
			n += int64(len(pt))
		})
	}
	c.seq = seq
	return tail, n
}

package aio

import (
	"io"
	"net"
	"sync"
	"time"
)

// errWouldBlock is what a tlsTransport's Read returns when no ciphertext
// is buffered and the transport does not block. crypto/tls keeps a
// partial record when the transport's error is a temporary net.Error
// (conn.go, readRecordOrCCS) and the same Read can be resumed once more
// bytes arrive; TestTLSReadResumesAfterTemporaryError fails if a Go
// release drops that behaviour.
var errWouldBlock error = wouldBlockError{}

type wouldBlockError struct{}

func (wouldBlockError) Error() string   { return "aio: TLS input would block" }
func (wouldBlockError) Timeout() bool   { return true }
func (wouldBlockError) Temporary() bool { return true }

// tlsTransport is the net.Conn a crypto/tls Conn runs over: ciphertext
// is pushed in by Feed (from the socket's packets) and leaves through out
// (the socket's output). While blocking (the handshake) Read waits for
// input; afterwards Read never blocks, so decryption can be driven by
// arriving packets.
//
// A handshake's transport has turns (see handshakeTurns): a Read that
// must wait gives the handshake stage's worker back and waits without one
// until a record that can move the handshake on has arrived whole and a
// worker has taken the next step up. Without turns (a test's client)
// Read simply waits.
type tlsTransport struct {
	out           func([]byte) error
	local, remote net.Addr
	turns         handshakeTurns

	mu   sync.Mutex
	cond sync.Cond
	// in[off:] is the ciphertext fed and not read yet; its array is kept
	// for the next Feed once it is read (up to keepInput bytes).
	in  []byte
	off int
	// lent is ciphertext lent by lend, read after in (which is empty when
	// lend is called) and copied into in by unlend if left unread.
	lent     []byte
	eof      bool // the peer closed: Read returns io.EOF once in is empty
	closed   bool // Close was called: Read and Write fail
	blocking bool
	scan     recordScanner // the input's records, while blocking
	// handed follows the record framing of what Read has handed to
	// crypto/tls: Read hands no byte past the end of the record it is
	// in, so crypto/tls never holds more than the record it is reading,
	// and once it returned a record's plaintext and nothing is buffered
	// here, a further Read would find nothing (drainLocked stops).
	handed recordScanner
	parked bool   // a Read waits without a worker
	mark   uint64 // scan.moves when it parked
}

func newTLSTransport(local, remote net.Addr, out func([]byte) error) *tlsTransport {
	t := &tlsTransport{out: out, local: local, remote: remote, blocking: true}
	t.cond.L = &t.mu
	return t
}

// keepInput is the largest input array a transport keeps for reuse.
const keepInput = 64 << 10

// Feed appends ciphertext; it copies p.
func (t *tlsTransport) Feed(p []byte) {
	t.mu.Lock()
	t.in = append(t.in, t.lent...)
	t.lent = nil
	t.in = append(t.in, p...)
	if t.blocking {
		t.scan.scan(p)
	}
	wake := t.parked && t.scan.moves > t.mark
	t.parked = t.parked && !wake
	t.mu.Unlock()
	t.cond.Broadcast()
	if wake {
		t.turns.resume()
	}
}

// lend makes p the input without copying it, until unlend: an established
// session decrypts the socket's bytes where they are and copies only a
// record cut short at their end. In blocking mode (the handshake) it
// feeds a copy.
func (t *tlsTransport) lend(p []byte) {
	t.mu.Lock()
	if t.blocking || t.unreadLocked() > 0 {
		t.mu.Unlock()
		t.Feed(p)
		return
	}
	t.lent = p
	t.mu.Unlock()
}

// unlend copies what is left of the lent bytes into the transport's own
// buffer.
func (t *tlsTransport) unlend() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lent) > 0 {
		t.in = append(t.in, t.lent...)
	}
	t.lent = nil
}

func (t *tlsTransport) unreadLocked() int { return len(t.in) - t.off + len(t.lent) }

// FeedEOF records that the peer will send nothing more.
func (t *tlsTransport) FeedEOF() {
	t.mu.Lock()
	t.eof = true
	wake := t.parked
	t.parked = false
	t.mu.Unlock()
	t.cond.Broadcast()
	if wake {
		t.turns.resume()
	}
}

// SetBlocking switches between the handshake's blocking reads and the
// record layer's non-blocking ones.
func (t *tlsTransport) SetBlocking(b bool) {
	t.mu.Lock()
	t.blocking = b
	t.mu.Unlock()
	t.cond.Broadcast()
}

// inspect calls f with the buffered input (under the lock: f must not
// keep it).
func (t *tlsTransport) inspect(f func([]byte)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(t.in[t.off:])
}

// Buffered reports the ciphertext bytes not yet read by crypto/tls.
func (t *tlsTransport) Buffered() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.unreadLocked()
}

func (t *tlsTransport) Read(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.closed || t.unreadLocked() == 0 {
		switch {
		case t.closed: // the connection is gone: what is buffered is moot
			return 0, net.ErrClosed
		case t.eof:
			return 0, io.EOF
		case !t.blocking:
			return 0, errWouldBlock
		case t.turns == nil:
			t.cond.Wait()
			continue
		}
		t.parked, t.mark = true, t.scan.moves
		t.mu.Unlock()
		t.turns.pause()
		t.mu.Lock()
	}
	if t.off == len(t.in) {
		n := copy(p, t.lent[:t.handed.room(t.lent)])
		t.handed.scan(t.lent[:n])
		t.lent = t.lent[n:]
		return n, nil
	}
	src := t.in[t.off:]
	n := copy(p, src[:t.handed.room(src)])
	t.handed.scan(src[:n])
	t.off += n
	if t.off == len(t.in) {
		t.in, t.off = t.in[:0], 0
		if cap(t.in) > keepInput {
			t.in = nil
		}
	}
	return n, nil
}

// Write hands p to out, which must copy what it keeps (crypto/tls reuses
// its buffer).
func (t *tlsTransport) Write(p []byte) (int, error) {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return 0, net.ErrClosed
	}
	if err := t.out(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close makes Read and Write fail and wakes a waiting Read (the
// connection closed, or its handshake timed out); a Read waiting without
// a worker goes on without one, since all it does is fail.
func (t *tlsTransport) Close() error {
	t.mu.Lock()
	t.closed = true
	wake := t.parked
	t.parked = false
	t.mu.Unlock()
	t.cond.Broadcast()
	if wake {
		t.turns.give()
	}
	return nil
}

func (t *tlsTransport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

func (t *tlsTransport) LocalAddr() net.Addr              { return t.local }
func (t *tlsTransport) RemoteAddr() net.Addr             { return t.remote }
func (t *tlsTransport) SetDeadline(time.Time) error      { return nil }
func (t *tlsTransport) SetReadDeadline(time.Time) error  { return nil }
func (t *tlsTransport) SetWriteDeadline(time.Time) error { return nil }

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

	mu       sync.Mutex
	cond     sync.Cond
	in       []byte
	eof      bool // the peer closed: Read returns io.EOF once in is empty
	closed   bool // Close was called: Read and Write fail
	blocking bool
	scan     recordScanner // the input's records, while blocking
	parked   bool          // a Read waits without a worker
	mark     uint64        // scan.moves when it parked
}

func newTLSTransport(local, remote net.Addr, out func([]byte) error) *tlsTransport {
	t := &tlsTransport{out: out, local: local, remote: remote, blocking: true}
	t.cond.L = &t.mu
	return t
}

// Feed appends ciphertext; it copies p.
func (t *tlsTransport) Feed(p []byte) {
	t.mu.Lock()
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
	f(t.in)
}

// Buffered reports the ciphertext bytes not yet read by crypto/tls.
func (t *tlsTransport) Buffered() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.in)
}

func (t *tlsTransport) Read(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.in) == 0 {
		switch {
		case t.closed:
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
	n := copy(p, t.in)
	t.in = t.in[n:]
	if len(t.in) == 0 {
		t.in = nil // let the array go; the next Feed allocates what it needs
	}
	return n, nil
}

// Write hands a copy of p to the socket (crypto/tls reuses its buffer).
func (t *tlsTransport) Write(p []byte) (int, error) {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return 0, net.ErrClosed
	}
	if err := t.out(append([]byte(nil), p...)); err != nil {
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

func (t *tlsTransport) LocalAddr() net.Addr              { return t.local }
func (t *tlsTransport) RemoteAddr() net.Addr             { return t.remote }
func (t *tlsTransport) SetDeadline(time.Time) error      { return nil }
func (t *tlsTransport) SetReadDeadline(time.Time) error  { return nil }
func (t *tlsTransport) SetWriteDeadline(time.Time) error { return nil }

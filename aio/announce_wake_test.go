package aio

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandstorm-go/sandstorm/sink"
)

// These tests pin down the interleavings of StartReader and the event
// loop's announcement of a connection (loopAnnounce) that
// TestStartReaderDuringAnnounceNeedsNoWake leaves to timing. A reader
// started while the loop announces gets no wake-up: the loop must deliver
// what is buffered itself once announce returns. A reader started after
// it must wake the loop. Either way the request that came with the
// connection (plain) or with the handshake's end (TLS) must reach the
// reader; a lost wake-up shows as a request never delivered, reported
// after waitLimit (a hang guard, not a timing threshold).

// readerStart is when the application starts reading a new connection.
type readerStart int

const (
	// startInline: StartReader inside Enqueue(*Connection), on the loop.
	startInline readerStart = iota
	// startDuringAnnounce: StartReader on another goroutine while
	// Enqueue(*Connection) blocks until it returned, so it runs exactly
	// while the loop is inside announce.
	startDuringAnnounce
	// startAfterAnnounce: StartReader on the test's goroutine once the
	// loop callback that announced the connection returned and the
	// request waits, read from the socket, for a reader.
	startAfterAnnounce
)

func (s readerStart) String() string {
	return [...]string{"inline in announce", "from another goroutine during announce", "after announce"}[s]
}

// announceCases are the table both tests run: how many wake-ups
// StartReader must ask for follows from when it runs.
var announceCases = []struct {
	start     readerStart
	wantWakes uint64
}{
	{startInline, 0},
	{startDuringAnnounce, 0},
	{startAfterAnnounce, 1},
}

// announceProbe is a server's sink that starts the connection's reader as
// its readerStart says and collects what the reader receives.
type announceProbe struct {
	t     *testing.T
	start readerStart
	// inAnnounce runs on the event loop while it announces the
	// connection, before the reader starts (checks that the request is
	// there already).
	inAnnounce func(c *Connection)
	announced  chan *Connection
	received   chan []byte
	got        []byte       // the reader's bytes so far (the reader's sink only)
	gotLen     atomic.Int64 // len(got), for the test's goroutine
	want       int          // the request's length
}

func newAnnounceProbe(t *testing.T, start readerStart, want int, inAnnounce func(*Connection)) *announceProbe {
	return &announceProbe{t: t, start: start, inAnnounce: inAnnounce, want: want,
		announced: make(chan *Connection, 1), received: make(chan []byte, 1)}
}

// owner is the server's sink: it is given the connection (Enqueue on the
// event loop, inside loopAnnounce).
func (p *announceProbe) owner() Receiver {
	return fnSink(func(e sink.Event) error {
		c, ok := e.(*Connection)
		if !ok {
			return nil
		}
		if p.inAnnounce != nil {
			p.inAnnounce(c)
		}
		switch p.start {
		case startInline:
			if err := c.StartReader(p.reader()); err != nil {
				p.t.Errorf("StartReader: %v", err)
			}
		case startDuringAnnounce:
			started := make(chan error, 1)
			go func() { started <- c.StartReader(p.reader()) }()
			select {
			case err := <-started:
				if err != nil {
					p.t.Errorf("StartReader: %v", err)
				}
			case <-time.After(waitLimit): // a hang guard only
				p.t.Errorf("StartReader from another goroutine did not return within %v", waitLimit)
			}
		}
		p.announced <- c
		return nil
	})
}

// reader collects the connection's packets and hands them over once the
// whole request is there.
func (p *announceProbe) reader() Receiver {
	return fnSink(func(e sink.Event) error {
		pk, ok := e.(Packet)
		if !ok {
			return nil
		}
		p.got = append(p.got, pk.Data...)
		p.gotLen.Store(int64(len(p.got)))
		if len(p.got) == p.want {
			p.received <- p.got
		}
		return nil
	})
}

// run waits for the announcement, starts the reader afterwards if that is
// the case, and checks that the request arrives and how many wake-ups
// StartReader asked for. requestParked returns once the announcing
// callback returned and the request waits for a reader (called only for
// startAfterAnnounce).
func (p *announceProbe) run(srv *Server, request []byte, wantWakes uint64, requestParked func(*Connection)) {
	t := p.t
	t.Helper()
	var c *Connection
	select {
	case c = <-p.announced:
	case <-time.After(waitLimit):
		t.Fatalf("the connection was not announced within %v", waitLimit)
	}
	if p.start == startAfterAnnounce {
		requestParked(c)
		if err := c.StartReader(p.reader()); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case got := <-p.received:
		if !bytes.Equal(got, request) {
			t.Fatalf("the reader got %d bytes that differ from the %d-byte request", len(got), len(request))
		}
	case <-time.After(waitLimit): // a hang guard only
		t.Fatalf("the request never reached the reader started %v (%d of %d bytes in %v): a wake-up was lost",
			p.start, p.gotLen.Load(), len(request), waitLimit)
	}
	if got := srv.eng.readerWakes.Load(); got != wantWakes {
		t.Errorf("StartReader %v asked for %d event-loop wake-ups, want %d", p.start, got, wantWakes)
	}
}

// loopBarrier returns once c's event loop has finished whatever callback
// it was running when loopBarrier was called: a task queued on the loop
// runs after it.
func loopBarrier(t *testing.T, c *Connection) {
	t.Helper()
	onLoop(t, c, func() {})
}

// TestPlainRequestReachesReaderStartedAroundAnnounce: a plain TCP client
// writes its request right after connecting, and the request is in the
// server's socket before the event loop's OnOpen finishes announcing the
// connection. The reader gets it whether it started during the
// announcement (no wake-up: the loop reads the socket after OnOpen) or
// after it, once the loop has taken the request from the socket into
// gnet's buffer with no reader to give it to (only StartReader's wake-up
// can deliver it then: nothing more comes from the socket).
func TestPlainRequestReachesReaderStartedAroundAnnounce(t *testing.T) {
	request := pattern(7, 300)
	for _, tc := range announceCases {
		t.Run(tc.start.String(), func(t *testing.T) {
			written := make(chan struct{})
			inAnnounce := func(c *Connection) {
				// The loop is in OnOpen: the client connected and writes.
				select {
				case <-written:
					waitSocketHolds(t, c, len(request))
				case <-time.After(waitLimit): // a hang guard only
					t.Errorf("the client did not write its request within %v", waitLimit)
				}
			}
			p := newAnnounceProbe(t, tc.start, len(request), inAnnounce)
			srv, err := Listen(SocketConfig{Addr: "127.0.0.1:0"}, p.owner(), Env{})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			client, err := net.Dial("tcp", srv.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			if _, err := client.Write(request); err != nil {
				t.Fatal(err)
			}
			close(written)
			p.run(srv, request, tc.wantWakes, func(c *Connection) {
				// The loop read the request into gnet's buffer (and so
				// emptied the socket) with no reader; the barrier lets
				// that callback finish.
				waitCond(t, "the request read from the socket", func() bool {
					return c.Stats().MaxUnread >= int64(len(request))
				})
				loopBarrier(t, c)
			})
		})
	}
}

// waitSocketHolds waits until c's socket has n bytes for the server to
// read (the kernel's receive queue, not yet read by gnet).
func waitSocketHolds(t *testing.T, c *Connection, n int) {
	deadline := time.Now().Add(waitLimit)
	for {
		queued, err := unix.IoctlGetInt(c.gc.Fd(), unix.SIOCINQ)
		if err != nil {
			t.Errorf("SIOCINQ: %v", err)
			return
		}
		if queued >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the socket holds %d bytes, want the %d-byte request, after %v", queued, n, waitLimit)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTLSRequestWithFinishedReachesReaderStartedAroundAnnounce: a TLS 1.3
// client sends its Finished and its first request in one write, so the
// request's record arrives in the same read as the handshake's end. When
// the server asks for no client certificate, the event loop checks the
// Finished itself, announces the connection and, if the application
// started reading meanwhile, decrypts the record itself (no wake-up).
// When it asks for one, the last step runs on a handshake worker, held
// until the loop's callback that fed the flight returned; the worker then
// wakes the loop, which announces from that wake-up's callback and reads
// likewise. If the reader starts after the loop's callback that announced
// returned, its own wake-up must have the record decrypted and delivered.
func TestTLSRequestWithFinishedReachesReaderStartedAroundAnnounce(t *testing.T) {
	f := newTLSFixture(t, TLSConfig{})
	request := pattern(11, 300)
	ends := []struct {
		name   string
		onLoop bool // the handshake's last step runs on the event loop
	}{
		{"last step on the loop", true},
		{"last step on a worker (client certificate asked)", false},
	}
	for _, end := range ends {
		for _, tc := range announceCases {
			t.Run(end.name+"/"+tc.start.String(), func(t *testing.T) {
				var sent atomic.Int64 // bytes the client wrote to the socket
				wakesBefore := f.hs.counter.announceWakes.Load()
				inAnnounce := func(c *Connection) {
					// Everything the client sent, the request included,
					// was read before the announcement: it came with the
					// handshake's end.
					if in, all := c.Stats().BytesIn, sent.Load(); in != uint64(all) {
						t.Errorf("%d bytes read by the announcement, want all %d the client sent (the request with the Finished)", in, all)
					}
					woken := f.hs.counter.announceWakes.Load() != wakesBefore
					if woken == end.onLoop {
						t.Errorf("announced after a wake-up by the handshake worker: %v, want %v", woken, !end.onLoop)
					}
				}
				cfg := f.srvCfg
				var lastStep *heldLastStep
				if !end.onLoop {
					cfg, lastStep = holdLastStep(f.srvCfg)
				}
				p := newAnnounceProbe(t, tc.start, len(request), inAnnounce)
				srv, err := Listen(SocketConfig{Addr: "127.0.0.1:0", TLS: &TLSConfig{Config: cfg}}, p.owner(), Env{Manager: f.m})
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Close()
				sendFinishedWithRequest(t, srv.Addr().String(), f, request, &sent)
				if lastStep != nil {
					lastStep.releaseAfterLoop(t, srv)
				}
				p.run(srv, request, tc.wantWakes, func(c *Connection) {
					// The callback that announced the connection returned
					// with the record undelivered (no reader).
					loopBarrier(t, c)
				})
			})
		}
	}
}

// heldLastStep holds a handshake's last step on its worker (in crypto/tls's
// check of the client's certificate, which comes in the client's last
// flight) until the event loop's callback that fed that flight returned:
// the worker then ends the handshake and wakes the loop, which announces
// the connection from that wake-up's callback and must read the records
// that came with the Finished there.
type heldLastStep struct {
	entered chan struct{}
	release chan struct{}
}

// holdLastStep returns a copy of cfg that asks for a client certificate
// (so the last step runs on a worker) and holds that step.
func holdLastStep(cfg *tls.Config) (*tls.Config, *heldLastStep) {
	h := &heldLastStep{entered: make(chan struct{}), release: make(chan struct{})}
	cfg = cfg.Clone()
	cfg.ClientAuth = tls.RequestClientCert
	cfg.VerifyPeerCertificate = func([][]byte, [][]*x509.Certificate) error {
		close(h.entered)
		select {
		case <-h.release:
			return nil
		case <-time.After(waitLimit): // a hang guard only
			return errors.New("the test did not release the handshake's last step")
		}
	}
	return cfg, h
}

// releaseAfterLoop waits until the last step is held, lets the event loop
// finish the callback that fed it, and releases it.
func (h *heldLastStep) releaseAfterLoop(t *testing.T, srv *Server) {
	t.Helper()
	select {
	case <-h.entered:
	case <-time.After(waitLimit):
		t.Fatalf("the handshake's last step did not start within %v", waitLimit)
	}
	loopBarrier(t, onlyConnection(t, srv))
	close(h.release)
}

// onlyConnection is the server's one open connection.
func onlyConnection(t *testing.T, srv *Server) *Connection {
	t.Helper()
	srv.eng.mu.Lock()
	defer srv.eng.mu.Unlock()
	if len(srv.eng.conns) != 1 {
		t.Fatalf("the server has %d connections, want 1", len(srv.eng.conns))
	}
	for c := range srv.eng.conns {
		return c
	}
	return nil
}

// sendFinishedWithRequest runs a TLS 1.3 client's side of the handshake
// with addr and writes request, its Finished and the request's record
// leaving in one write; sent counts the bytes written to the socket.
func sendFinishedWithRequest(t *testing.T, addr string, f *tlsFixture, request []byte, sent *atomic.Int64) {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	_ = raw.SetDeadline(time.Now().Add(waitLimit)) // a hang guard only
	held := &finishedHolder{Conn: raw, sent: sent}
	client := tls.Client(held, &tls.Config{RootCAs: f.roots, ServerName: "localhost",
		MinVersion: tls.VersionTLS13})
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write(request); err != nil {
		t.Fatal(err)
	}
	if early, err := held.flush(); err != nil {
		t.Fatal(err)
	} else if early != 1 {
		t.Fatalf("the client wrote %d times before its Finished and request, want 1 (the ClientHello)", early)
	}
}

// finishedHolder is a TLS client's connection that sends its ClientHello
// at once and holds everything after it (the client's Finished flight,
// then its first records) until flush, which sends it all in one write
// and reports how many writes went out before it.
type finishedHolder struct {
	net.Conn
	sent *atomic.Int64 // bytes written to the socket

	mu      sync.Mutex
	hold    []byte
	early   int // writes sent before flush (the ClientHello's: 1)
	flushed bool
}

func (h *finishedHolder) Write(b []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.flushed || len(b) > 0 && b[0] == recordTypeHandshake { // the ClientHello, in the clear
		if !h.flushed {
			h.early++
		}
		n, err := h.Conn.Write(b)
		h.sent.Add(int64(n))
		return n, err
	}
	h.hold = append(h.hold, b...)
	return len(b), nil
}

func (h *finishedHolder) flush() (early int, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.flushed = true
	// Counted first: the server may announce as soon as the bytes arrive.
	h.sent.Add(int64(len(h.hold)))
	_, err = h.Conn.Write(h.hold)
	return h.early, err
}

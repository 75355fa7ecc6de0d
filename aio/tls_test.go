package aio

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/stage"
)

// memPair wires a server session (driven by the handshake stage, reading
// without blocking afterwards) to a blocking crypto/tls client: each
// side's raw output is the other's input.
type memPair struct {
	srv     *tlsSession
	cli     *tls.Conn
	cliT    *tlsTransport
	mu      sync.Mutex
	got     []byte // plaintext the server delivered
	feedErr error
}

func newMemPair(srvCfg, cliCfg *tls.Config) *memPair {
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}
	p := &memPair{}
	p.cliT = newTLSTransport(addr, addr, func(b []byte) error {
		return p.serverInput(b)
	})
	p.srv = newTLSSession(true, srvCfg, addr, addr, func(b []byte) error { p.cliT.Feed(b); return nil })
	p.cli = tls.Client(p.cliT, cliCfg)
	return p
}

func (p *memPair) serverInput(b []byte) error {
	return p.srv.feed(b, func(pt []byte) {
		p.mu.Lock()
		p.got = append(p.got, pt...)
		p.mu.Unlock()
	})
}

func (p *memPair) plaintext() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]byte(nil), p.got...)
}

type tlsFixture struct {
	m      *stage.Manager
	hs     *Handshakes
	srvCfg *tls.Config
	roots  *x509.CertPool
}

func newTLSFixture(t testing.TB, cfg TLSConfig) *tlsFixture {
	t.Helper()
	f := newTLSFixtureStopped(t, cfg)
	f.start(t)
	return f
}

// start starts the fixture's manager (and so the handshake stage's workers).
func (f *tlsFixture) start(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if err := f.m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		_ = f.m.Shutdown(sctx)
		cancel()
	})
}

// newTLSFixtureStopped is newTLSFixture with the manager not started yet.
func newTLSFixtureStopped(t testing.TB, cfg TLSConfig) *tlsFixture {
	t.Helper()
	def, err := SelfSigned(0, "localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := SelfSigned(0, "other.test")
	if err != nil {
		t.Fatal(err)
	}
	store, err := NewCertStoreFrom(def, other)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = store
	srvCfg, _, err := cfg.serverConfig()
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(def.Leaf)
	roots.AddCert(other.Leaf)
	m := stage.NewManager(stage.Options{})
	hs, err := TLSHandshakes(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &tlsFixture{m: m, hs: hs, srvCfg: srvCfg, roots: roots}
}

func (f *tlsFixture) clientConfig(server string, version uint16) *tls.Config {
	c := TLSConfig{Config: &tls.Config{RootCAs: f.roots, ServerName: server, MaxVersion: version}}.clientConfig()
	return c
}

// handshake runs both sides and returns the server's outcome.
func (f *tlsFixture) handshake(t testing.TB, p *memPair) error {
	t.Helper()
	srvDone := make(chan error, 1)
	if err := f.hs.submit(p.srv, func(err error) { srvDone <- err }); err != nil {
		return err
	}
	cliErr := p.cli.Handshake()
	var srvErr error
	select {
	case srvErr = <-srvDone:
	case <-time.After(30 * time.Second): // a hang guard, not a threshold
		t.Fatal("the server's handshake did not end")
	}
	if srvErr != nil {
		return srvErr
	}
	return cliErr
}

func TestTLSHandshakeVersionsALPNResumptionSNI(t *testing.T) {
	f := newTLSFixture(t, TLSConfig{})
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		cliCfg := f.clientConfig("localhost", v)
		for round := range 2 { // the second connection resumes the first's session
			p := newMemPair(f.srvCfg, cliCfg)
			if err := f.handshake(t, p); err != nil {
				t.Fatalf("%s round %d: %v", tls.VersionName(v), round, err)
			}
			st := p.cli.ConnectionState()
			if st.Version != v || st.NegotiatedProtocol != "http/1.1" {
				t.Fatalf("%s: negotiated %s, ALPN %q", tls.VersionName(v), tls.VersionName(st.Version), st.NegotiatedProtocol)
			}
			if round == 1 && !p.srv.state().DidResume {
				t.Fatalf("%s: second handshake did not resume the session", tls.VersionName(v))
			}
			if v == tls.VersionTLS13 {
				// TLS 1.3 tickets arrive after the handshake: read them.
				_ = p.cli.SetReadDeadline(time.Time{})
				p.cliT.SetBlocking(false)
				buf := make([]byte, 1)
				_, _ = p.cli.Read(buf)
			}
		}
	}
	// SNI picks the certificate naming the server.
	p := newMemPair(f.srvCfg, f.clientConfig("other.test", 0))
	if err := f.handshake(t, p); err != nil {
		t.Fatalf("SNI other.test: %v", err)
	}
	if got := p.cli.ConnectionState().PeerCertificates[0].DNSNames[0]; got != "other.test" {
		t.Fatalf("SNI other.test: got the certificate for %q", got)
	}
	// TLS 1.1 is refused.
	old := &tls.Config{RootCAs: f.roots, ServerName: "localhost", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}
	if err := f.handshake(t, newMemPair(f.srvCfg, old)); err == nil {
		t.Fatal("a TLS 1.1 client completed a handshake")
	}
	st := f.hs.Stats()
	if st.Handshakes != 5 || st.Resumed != 2 || st.TLS12 != 2 || st.TLS13 != 3 || st.OtherFailures+st.PeerGone != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestTLSRecordsFedOneByteAtATime(t *testing.T) {
	f := newTLSFixture(t, TLSConfig{})
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		var wire bytes.Buffer
		capture := false
		p := newMemPair(f.srvCfg, f.clientConfig("localhost", v))
		inner := p.cliT.out
		p.cliT.out = func(b []byte) error {
			if capture {
				wire.Write(b)
				return nil
			}
			return inner(b)
		}
		if err := f.handshake(t, p); err != nil {
			t.Fatal(err)
		}
		capture = true
		var want []byte
		for i := range 3 { // two full 16 KiB records and a short one
			chunk := bytes.Repeat([]byte{byte('a' + i)}, 16<<10)
			if i == 2 {
				chunk = []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			}
			want = append(want, chunk...)
			if _, err := p.cli.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		for i, b := range wire.Bytes() {
			if err := p.serverInput([]byte{b}); err != nil {
				t.Fatalf("%s: byte %d: %v", tls.VersionName(v), i, err)
			}
		}
		if got := p.plaintext(); !bytes.Equal(got, want) {
			t.Fatalf("%s: server delivered %d bytes, want %d identical", tls.VersionName(v), len(got), len(want))
		}
		// close_notify ends the stream: feed reports io.EOF.
		wire.Reset()
		if err := p.cli.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if err := p.serverInput(wire.Bytes()); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: close_notify: feed = %v; want io.EOF", tls.VersionName(v), err)
		}
	}
}

func TestTLSHandshakeFailures(t *testing.T) {
	f := newTLSFixture(t, TLSConfig{})

	// Garbage instead of a ClientHello: closed, counted, no panic.
	p := newMemPair(f.srvCfg, f.clientConfig("localhost", 0))
	done := make(chan error, 1)
	if err := f.hs.submit(p.srv, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	_ = p.serverInput([]byte("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"))
	if err := <-done; err == nil {
		t.Fatal("a plain-text request passed the handshake")
	}

	// A client that stalls after connecting is timed out when its
	// connection's timer expires it (here: at once).
	p = newMemPair(f.srvCfg, f.clientConfig("localhost", 0))
	if err := f.hs.submit(p.srv, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if !p.srv.expire() {
		t.Fatal("expire: the stalled handshake had already ended")
	}
	if err := <-done; err == nil {
		t.Fatal("a stalled handshake succeeded")
	}
	if p.srv.expire() {
		t.Fatal("expire ended a handshake twice")
	}
	st := f.hs.Stats()
	if st.NotTLS != 1 || st.Timeouts != 1 || st.Handshakes != 0 || st.PeerGone != 0 {
		t.Fatalf("stats = %+v; want one not-TLS failure and one timeout", st)
	}
}

// TestTLSStalledHandshakesHoldNoWorker parks many handshakes whose
// clients never answer on a stage with one worker: each gives the worker
// back while it waits, so a real client's handshake still completes.
func TestTLSStalledHandshakesHoldNoWorker(t *testing.T) {
	f := newTLSFixture(t, TLSConfig{Stage: HandshakeStageConfig{Workers: 1, Queue: 64}})
	var stalled []*memPair
	for range 50 {
		p := newMemPair(f.srvCfg, f.clientConfig("localhost", 0))
		if err := f.hs.submit(p.srv, func(error) {}); err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, p)
	}
	// Half of them send a ClientHello and then never the next flight.
	for _, p := range stalled[:25] {
		toServer, sent := p.cliT.out, false
		p.cliT.out = func(b []byte) error {
			if sent {
				return nil
			}
			sent = true
			return toServer(b)
		}
		go func() { _ = p.cli.Handshake() }()
	}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		if err := f.handshake(t, newMemPair(f.srvCfg, f.clientConfig("localhost", v))); err != nil {
			t.Fatalf("%s with 50 stalled handshakes parked: %v", tls.VersionName(v), err)
		}
	}
	for _, p := range stalled {
		p.srv.expire()
		p.cliT.Close()
	}
	st := f.hs.Stats()
	if st.Handshakes != 2 || st.Timeouts != 50 {
		t.Fatalf("stats = %+v; want 2 handshakes and 50 timeouts", st)
	}
}

func TestTLSHandshakeFloodRefused(t *testing.T) {
	const workers, queue, clients = 4, 8, 40
	f := newTLSFixtureStopped(t, TLSConfig{Stage: HandshakeStageConfig{Workers: workers, Queue: queue}})
	// Before the stage runs, the first steps fill its queue; the rest is
	// refused at once, and the refusal says why.
	results := make(chan error, clients)
	var admitted []*memPair
	refused := 0
	for range clients {
		p := newMemPair(f.srvCfg, f.clientConfig("localhost", 0))
		err := f.hs.submit(p.srv, func(err error) { results <- err })
		if errors.Is(err, ErrHandshakeRefused) {
			refused++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		admitted = append(admitted, p)
	}
	if len(admitted) > queue || refused < clients-queue {
		t.Fatalf("admitted %d, refused %d; want at most %d admitted", len(admitted), refused, queue)
	}
	if got := f.hs.Stats().Refused; got != uint64(refused) {
		t.Fatalf("Refused counter = %d; %d refusals returned", got, refused)
	}
	// The admitted ones complete once the stage runs.
	f.start(t)
	for _, p := range admitted {
		go func() { _ = p.cli.Handshake() }()
	}
	for range admitted {
		if err := <-results; err != nil {
			t.Fatalf("an admitted handshake failed: %v", err)
		}
	}
	if st := f.hs.Stats(); st.Handshakes != uint64(len(admitted)) {
		t.Fatalf("stats = %+v; want %d handshakes", st, len(admitted))
	}
}

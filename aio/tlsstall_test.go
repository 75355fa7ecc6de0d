package aio_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/sink"
)

// openStalled opens n TCP connections to addr: the even ones send the
// first 4 bytes of a TLS record header, the odd ones nothing.
func openStalled(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("stalled connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if i%2 == 0 {
			if _, err := c.Write([]byte{0x16, 0x03, 0x01, 0x02}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return conns
}

// echoOnce runs a real crypto/tls client over conn (nil: a new
// connection to addr): handshake, one message, its echo.
func echoOnce(t *testing.T, addr string, conn net.Conn, roots *x509.CertPool, version uint16) {
	t.Helper()
	if conn == nil {
		var err error
		if conn, err = net.Dial("tcp", addr); err != nil {
			t.Fatal(err)
		}
	}
	c := tls.Client(conn, &tls.Config{RootCAs: roots, ServerName: "localhost", MaxVersion: version})
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // a hang guard, not a threshold
	if err := c.Handshake(); err != nil {
		t.Fatalf("%s: handshake: %v", tls.VersionName(version), err)
	}
	msg := []byte("hello through the stalled crowd")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("%s: echo %q, %v", tls.VersionName(version), got, err)
	}
}

// TestTLSSocketServesThroughStalledConnections opens 300 connections that
// never complete a ClientHello (half of them with 4 bytes of a record
// header): they hold no handshake worker, so a real client, on a stage of
// two workers, completes its handshakes and gets its echo.
func TestTLSSocketServesThroughStalledConnections(t *testing.T) {
	addr, roots, hs, _ := tlsEcho(t, aio.TLSConfig{Stage: aio.HandshakeStageConfig{Workers: 2}})
	openStalled(t, addr, 300)
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		echoOnce(t, addr, nil, roots, v)
	}
	if st := hs.Stats(); st.Handshakes != 2 || st.Timeouts != 0 {
		t.Fatalf("stats = %+v; want 2 handshakes, no timeout yet", st)
	}
}

// stallAfterHello forwards only the first Write (the ClientHello): the
// handshake then waits for a flight that never comes.
type stallAfterHello struct {
	net.Conn
	sent bool
}

func (s *stallAfterHello) Write(p []byte) (int, error) {
	if s.sent {
		return len(p), nil
	}
	s.sent = true
	return s.Conn.Write(p)
}

// TestTLSSocketStalledClosedAtTimeout: connections that stall before,
// inside or after their ClientHello are closed at HandshakeTimeout by the
// connection's timer and counted as timeouts.
func TestTLSSocketStalledClosedAtTimeout(t *testing.T) {
	addr, roots, hs, _ := tlsEcho(t, aio.TLSConfig{HandshakeTimeout: 200 * time.Millisecond})
	conns := openStalled(t, addr, 20)
	for range 4 {
		raw, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, raw)
		c := tls.Client(&stallAfterHello{Conn: raw}, &tls.Config{RootCAs: roots, ServerName: "localhost"})
		go func() { _ = c.Handshake() }() // ends when the server closes
	}
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a hang guard
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("connection %d: %v; want the server to close it", i, err)
		}
	}
	waitFor(t, func() bool { return hs.Stats().Timeouts == uint64(len(conns)) }, "24 timeouts")
	if st := hs.Stats(); st.Handshakes != 0 || st.PeerGone != 0 || st.NotTLS != 0 {
		t.Fatalf("stats = %+v; want only timeouts", st)
	}
}

// splitWrites sends each Write in pieces of size bytes, pausing between
// them so that they leave as separate packets (TCP_NODELAY is Go's
// default).
type splitWrites struct {
	net.Conn
	size int
}

func (s *splitWrites) Write(p []byte) (int, error) {
	for i := 0; i < len(p); i += s.size {
		if _, err := s.Conn.Write(p[i:min(i+s.size, len(p))]); err != nil {
			return i, err
		}
		time.Sleep(200 * time.Microsecond)
	}
	return len(p), nil
}

func TestTLSSocketClientHelloInManyPackets(t *testing.T) {
	addr, roots, hs, _ := tlsEcho(t, aio.TLSConfig{})
	for _, tc := range []struct {
		size    int
		version uint16
	}{{1, tls.VersionTLS13}, {3, tls.VersionTLS12}, {100, tls.VersionTLS13}} {
		raw, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		echoOnce(t, addr, &splitWrites{Conn: raw, size: tc.size}, roots, tc.version)
	}
	if st := hs.Stats(); st.Handshakes != 3 {
		t.Fatalf("stats = %+v; want 3 handshakes", st)
	}
}

func TestTLSSocketGarbageClosedAndCounted(t *testing.T) {
	addr, _, hs, _ := tlsEcho(t, aio.TLSConfig{})
	for i, tc := range []struct {
		name  string
		bytes []byte
	}{
		{"plain HTTP", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"an alert record", []byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28}},
		{"SSL 2 ClientHello", []byte{0x80, 0x2e, 0x01, 0x00, 0x02}},
		{"record version 4", []byte{0x16, 0x04, 0x01, 0x00, 0x10}},
		{"oversized record", []byte{0x16, 0x03, 0x01, 0xff, 0xff}},
		{"empty record", []byte{0x16, 0x03, 0x01, 0x00, 0x00}},
		{"a ServerHello", []byte{0x16, 0x03, 0x03, 0x00, 0x30, 0x02, 0x00, 0x00, 0x2c}},
		{"a 16 MiB ClientHello", []byte{0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0xff, 0xff, 0xff}},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(tc.bytes); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a hang guard
		if n, err := io.Copy(io.Discard, c); err != nil || n != 0 {
			t.Fatalf("%s: read %d bytes, %v; want the server to close at once", tc.name, n, err)
		}
		c.Close()
		waitFor(t, func() bool { return hs.Stats().NotTLS == uint64(i+1) }, tc.name+" counted as not TLS")
	}
}

// TestTLSSocketALPNAndState: a server offering h2 then http/1.1 (as the
// HTTP/2 port does) negotiates each with the client that asks for it, and
// the application reads the outcome from TLSState once it gets the
// connection.
func TestTLSSocketALPNAndState(t *testing.T) {
	cert, err := aio.SelfSigned(0)
	if err != nil {
		t.Fatal(err)
	}
	store, err := aio.NewCertStoreFrom(cert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	m := startedManager(t)
	cfg := aio.TLSConfig{Store: store, Config: &tls.Config{NextProtos: []string{"h2", "http/1.1"}}}
	srv, err := aio.Listen(aio.SocketConfig{Addr: "127.0.0.1:0", TLS: &cfg}, aio.Func(func(e sink.Event) error {
		c, ok := e.(*aio.Connection)
		if !ok {
			return nil
		}
		st, ok := c.TLSState()
		if !ok {
			return c.Close()
		}
		// Answer with the protocol the server side negotiated.
		return c.Write([]byte(st.NegotiatedProtocol+"\n"), nil, nil)
	}), aio.Env{Manager: m})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, offer := range [][]string{{"h2", "http/1.1"}, {"http/1.1"}} {
		c, err := tls.Dial("tcp", srv.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: offer})
		if err != nil {
			t.Fatalf("offer %v: %v", offer, err)
		}
		_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // a hang guard
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || line != offer[0]+"\n" || c.ConnectionState().NegotiatedProtocol != offer[0] {
			t.Fatalf("offer %v: server says %q (%v), client negotiated %q", offer, line, err, c.ConnectionState().NegotiatedProtocol)
		}
	}
}

package aio_test

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

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// tlsEcho listens with TLS on loopback and echoes every packet back; it
// returns the address, the roots a client needs and the handshake stage.
func tlsEcho(t *testing.T, cfg aio.TLSConfig) (string, *x509.CertPool, *aio.Handshakes, *closedCount) {
	t.Helper()
	cert, err := aio.SelfSigned(0)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, err = aio.NewCertStoreFrom(cert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	m := startedManager(t)
	closed := &closedCount{}
	srv, err := aio.Listen(aio.SocketConfig{Addr: "127.0.0.1:0", TLS: &cfg}, aio.Func(func(e sink.Event) error {
		c, ok := e.(*aio.Connection)
		if !ok {
			return nil
		}
		return c.StartReader(aio.Func(func(e sink.Event) error {
			switch v := e.(type) {
			case aio.Packet:
				return v.Conn.Write(v.Data, nil, nil)
			case aio.SinkClosed:
				closed.add()
			}
			return nil
		}))
	}), aio.Env{Manager: m})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := aio.TLSHandshakes(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv.Addr().String(), roots, hs, closed
}

// startedManager returns a started manager, shut down when the test ends
// (after the test's own cleanups: a socket closes before its stages stop).
func startedManager(t *testing.T) *stage.Manager {
	t.Helper()
	m := stage.NewManager(stage.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		_ = m.Shutdown(sctx)
		cancel()
	})
	return m
}

type closedCount struct {
	mu sync.Mutex
	n  int
}

func (c *closedCount) add() { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *closedCount) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func TestTLSSocketEcho(t *testing.T) {
	addr, roots, hs, closed := tlsEcho(t, aio.TLSConfig{})
	cache := tls.NewLRUClientSessionCache(4)
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13, tls.VersionTLS13} {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "localhost",
			MaxVersion: v, ClientSessionCache: cache, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatalf("%s: dial: %v", tls.VersionName(v), err)
		}
		if st := conn.ConnectionState(); st.NegotiatedProtocol != "http/1.1" || st.Version != v {
			t.Fatalf("negotiated %s / %q", tls.VersionName(st.Version), st.NegotiatedProtocol)
		}
		// Small writes, then a record-sized one and more: all echoed in order.
		want := []byte("hello, ")
		want = append(want, bytes.Repeat([]byte("0123456789abcdef"), 4096)...) // 64 KiB: four full records
		for i := 0; i < len(want); i += 7000 {
			if _, err := conn.Write(want[i:min(i+7000, len(want))]); err != nil {
				t.Fatal(err)
			}
		}
		got := make([]byte, len(want))
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.ReadFull(conn, got); err != nil {
			t.Fatalf("%s: read echo: %v", tls.VersionName(v), err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: echo differs", tls.VersionName(v))
		}
		if err := conn.Close(); err != nil { // sends close_notify
			t.Fatal(err)
		}
	}
	st := hs.Stats()
	if st.Handshakes != 3 || st.TLS12 != 1 || st.TLS13 != 2 || st.Resumed != 1 {
		t.Fatalf("handshake stats = %+v; want 3 handshakes (one 1.2, two 1.3, the second 1.3 resumed)", st)
	}
	waitFor(t, func() bool { return closed.get() == 3 }, "three SinkClosed")
}

func TestTLSSocketGarbageAndStall(t *testing.T) {
	addr, _, hs, _ := tlsEcho(t, aio.TLSConfig{HandshakeTimeout: 300 * time.Millisecond})
	// Plain HTTP on the TLS port: closed, counted, nothing delivered.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, _ = io.Copy(io.Discard, c) // until the server closes
	c.Close()
	// A client that connects and says nothing is timed out.
	s, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, _ = io.Copy(io.Discard, s)
	s.Close()
	waitFor(t, func() bool { st := hs.Stats(); return st.NotTLS == 1 && st.Timeouts == 1 }, "one not-TLS failure and one timeout")
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestTLSClientSocket(t *testing.T) {
	addr, roots, _, _ := tlsEcho(t, aio.TLSConfig{})
	m := startedManager(t)
	cl, err := aio.NewClient(aio.SocketConfig{TLS: &aio.TLSConfig{Config: &tls.Config{RootCAs: roots}}}, aio.Env{Manager: m})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	events := make(chan sink.Event, 64)
	recv := aio.Func(func(e sink.Event) error { events <- e; return nil })
	_, port, _ := net.SplitHostPort(addr)
	if err := cl.Connect("localhost:"+port, recv, "echo"); err != nil {
		t.Fatal(err)
	}
	var conn *aio.Connection
	select {
	case e := <-events:
		c, ok := e.(*aio.Connection)
		if !ok {
			t.Fatalf("got %#v, want the connection", e)
		}
		conn = c
	case <-time.After(30 * time.Second):
		t.Fatal("no connection")
	}
	if st, ok := conn.TLSState(); !ok || st.ServerName != "localhost" || st.NegotiatedProtocol != "http/1.1" {
		t.Fatalf("TLS state %+v, %v", st, ok)
	}
	if err := conn.StartReader(recv); err != nil {
		t.Fatal(err)
	}
	msg := bytes.Repeat([]byte("ping "), 5000)
	if err := conn.Write(msg, nil, nil); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for len(got) < len(msg) {
		select {
		case e := <-events:
			if p, ok := e.(aio.Packet); ok {
				got = append(got, p.Data...)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("echo: got %d of %d bytes", len(got), len(msg))
		}
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("echo differs")
	}

	// A server whose certificate the client does not trust: ConnectFailed.
	cl2, err := aio.NewClient(aio.SocketConfig{TLS: &aio.TLSConfig{}, Name: "untrusting"}, aio.Env{Manager: m})
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	if err := cl2.Connect("localhost:"+port, recv, "untrusted"); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case e := <-events:
			if f, ok := e.(aio.ConnectFailed); ok {
				var uerr x509.UnknownAuthorityError
				if !errors.As(f.Err, &uerr) {
					t.Fatalf("ConnectFailed: %v; want an unknown-authority error", f.Err)
				}
				return
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no ConnectFailed for an untrusted certificate")
		}
	}
}

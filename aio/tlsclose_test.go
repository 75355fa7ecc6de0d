package aio_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/sink"
)

// announcedServer listens with TLS and counts the connections it was
// handed and the SinkClosed events of those connections (to the reader,
// or to the owner if the connection closed before its reader started).
// A SinkClosed for a connection not handed over yet is counted as out of
// order: the application would not know which connection closed.
type announcedServer struct {
	srv                        *aio.Server
	roots                      *x509.CertPool
	mu                         sync.Mutex
	seen                       map[*aio.Connection]bool
	opened, closed, outOfOrder int
}

func (a *announcedServer) counts() (opened, closed, outOfOrder int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.opened, a.closed, a.outOfOrder
}

func (a *announcedServer) onClosed(c *aio.Connection) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.seen[c] {
		a.outOfOrder++
		return
	}
	a.closed++
}

func listenCounting(t *testing.T, cfg aio.TLSConfig) *announcedServer {
	t.Helper()
	cert, err := aio.SelfSigned(0)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Store, err = aio.NewCertStoreFrom(cert); err != nil {
		t.Fatal(err)
	}
	a := &announcedServer{roots: x509.NewCertPool(), seen: map[*aio.Connection]bool{}}
	a.roots.AddCert(cert.Leaf)
	reader := aio.Func(func(e sink.Event) error {
		if ev, ok := e.(aio.SinkClosed); ok {
			a.onClosed(ev.Conn)
		}
		return nil
	})
	a.srv, err = aio.Listen(aio.SocketConfig{Addr: "127.0.0.1:0", TLS: &cfg}, aio.Func(func(e sink.Event) error {
		switch ev := e.(type) {
		case aio.SinkClosed:
			a.onClosed(ev.Conn)
		case *aio.Connection:
			runtime.Gosched() // an application that takes its time to accept
			a.mu.Lock()
			a.seen[ev] = true
			a.opened++
			a.mu.Unlock()
			return ev.StartReader(reader)
		}
		return nil
	}), aio.Env{Manager: startedManager(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.srv.Close() })
	return a
}

// TestTLSPeerClosingRightAfterHandshakeIsClosed: a client that closes
// (close_notify, FIN) as soon as its handshake is done, so that its last
// flight, its close_notify and its FIN may all arrive while the server's
// last handshake step is still queued or running, is closed by the server
// every time, and every connection the application was handed gets its
// SinkClosed. One handshake worker and many clients at once make the
// steps queue.
func TestTLSPeerClosingRightAfterHandshakeIsClosed(t *testing.T) {
	for _, tc := range []struct {
		version          uint16
		workers, clients int
	}{
		{tls.VersionTLS12, 1, 8},
		{tls.VersionTLS13, 1, 8},
		{tls.VersionTLS13, 4, 2},
	} {
		t.Run(fmt.Sprintf("%s/%dworkers", tls.VersionName(tc.version), tc.workers), func(t *testing.T) {
			a := listenCounting(t, aio.TLSConfig{HandshakeTimeout: time.Hour, Stage: aio.HandshakeStageConfig{
				Name: "aio.tls." + t.Name(), Workers: tc.workers}})
			const rounds = 25
			var wg sync.WaitGroup
			errs := make(chan error, tc.clients)
			for range tc.clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range rounds {
						conn, err := tls.Dial("tcp", a.srv.Addr().String(), &tls.Config{RootCAs: a.roots,
							ServerName: "localhost", MaxVersion: tc.version, NextProtos: []string{"h2", "http/1.1"}})
						if err != nil {
							errs <- err
							return
						}
						_ = conn.Close()
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return len(a.srv.Connections()) == 0 }, "the server to close every connection")
			waitFor(t, func() bool { opened, closed, wrong := a.counts(); return closed+wrong >= opened }, "a SinkClosed for every connection handed over")
			if opened, closed, wrong := a.counts(); wrong > 0 || closed != opened {
				t.Fatalf("%d connections handed over, %d SinkClosed after them, %d before", opened, closed, wrong)
			}
			// Nothing is left to wait for: no closed connection is kept
			// in the socket's watch set until its handshake deadline
			// (an hour), so Shutdown ends before its context (a hang
			// guard).
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := a.srv.Shutdown(ctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
		})
	}
}

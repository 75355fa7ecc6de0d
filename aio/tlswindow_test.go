package aio

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// TestWriteBeyondWindowNeedsNoDrainPolls: in-memory bytes larger than
// the write window (a cached page over TLS, sealed records) go out window
// after window on the event loop while the socket takes them, and a full
// socket waits for the write poller, not for the maintenance goroutine's
// drain poll, made an hour apart here. Before, the loop handed one window
// per visit and the rest waited for that poll: each write below stalled
// after its first window (the hang guard fired).
func TestWriteBeyondWindowNeedsNoDrainPolls(t *testing.T) {
	const window = 16 << 10
	for _, tc := range []struct {
		name string
		tls  bool
		size int // each write's; the client reads once all three are queued
	}{
		{"plain, 4 windows: the socket takes them", false, 4 * window},
		{"plain, 8 MiB: the socket fills", false, 8 << 20},
		{"TLS, 4 windows: the socket takes them", true, 4 * window},
		{"TLS, 8 MiB: the socket fills", true, 8 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t)
			cfg := SocketConfig{WriteWindow: window, PollInterval: time.Hour}
			c, client := windowConn(t, cfg, tc.tls)
			data := pattern(7, tc.size)
			done := make(chan error, 3)
			var want bytes.Buffer
			for i := range 3 { // three writes in a row, each beyond the window
				p := data
				if i > 0 {
					p = pattern(7+i, tc.size)
				}
				want.Write(p)
				if err := c.Write(p, nil, func(err error) { done <- err }); err != nil {
					t.Fatal(err)
				}
			}
			_ = client.SetReadDeadline(time.Now().Add(time.Minute)) // hang guard
			got := make([]byte, want.Len())
			if _, err := io.ReadFull(client, got); err != nil {
				t.Fatalf("%v: the output stalled between windows", err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatal("bytes corrupted")
			}
			for range 3 {
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("completion %v", err)
					}
				case <-time.After(time.Minute): // hang guard
					t.Fatal("a completion never came")
				}
			}
		})
	}
}

// windowConn is a server connection with cfg and its client: over TLS
// (1.3) when useTLS.
func windowConn(t *testing.T, cfg SocketConfig, useTLS bool) (*Connection, interface {
	io.Reader
	SetReadDeadline(time.Time) error
}) {
	t.Helper()
	if !useTLS {
		_, _, c, client := serverConn(t, cfg)
		return c, client
	}
	f := newTLSFixture(t, TLSConfig{})
	cfg.TLS = &TLSConfig{Config: f.srvCfg}
	owner := newRecorder("owner")
	srv := listen(t, cfg, owner, Env{Manager: f.m})
	raw, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client := tls.Client(raw, &tls.Config{RootCAs: f.roots, ServerName: "localhost"})
	t.Cleanup(func() { _ = client.Close() })
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	evs := owner.wait(t, "connection", func(evs []sink.Event) bool { return count[*Connection](evs) == 1 })
	c, _ := first[*Connection](evs)
	return c, client
}

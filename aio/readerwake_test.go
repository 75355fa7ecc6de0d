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

// TestStartReaderDuringAnnounceNeedsNoWake: a connection that the event
// loop announces from its own callback (OnOpen for plain TCP; for TLS
// 1.3, onTraffic once the handshake's last step ran there) and whose
// application starts reading during the announcement is read by that
// same callback: StartReader wakes no event loop, and the request sent
// with the handshake's end (TLS) or right after the connect (plain) is
// still answered. A reader started from another goroutine wakes the loop
// (at most once per connection: none when it comes while the loop is
// still announcing, which then reads itself) and gets what was buffered.
// Before 2026-11-27 every StartReader woke the loop (an eventfd write and
// read and a task queued per connection).
func TestStartReaderDuringAnnounceNeedsNoWake(t *testing.T) {
	const conns = 8
	f := newTLSFixture(t, TLSConfig{})
	tests := []struct {
		name     string
		tls      bool
		async    bool // StartReader from another goroutine
		maxWakes uint64
	}{
		{"plain, inline", false, false, 0},
		{"TLS 1.3, inline", true, false, 0},
		{"plain, from another goroutine", false, true, conns},
		{"TLS 1.3, from another goroutine", true, true, conns},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			echo := inlineEcho(func(p Packet) error { return p.Conn.Enqueue(bytes.Clone(p.Data)) })
			var recv fnSink = echo
			if tc.async {
				recv = func(e sink.Event) error {
					if c, ok := e.(*Connection); ok {
						go func() { _ = c.StartReader(echo) }()
						return nil
					}
					return echo(e)
				}
			}
			cfg := SocketConfig{Addr: "127.0.0.1:0"}
			if tc.tls {
				cfg.TLS = &TLSConfig{Config: f.srvCfg}
			}
			srv, err := Listen(cfg, recv, Env{Manager: f.m})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			for i := range conns {
				var c net.Conn
				if tc.tls {
					c, err = tls.Dial("tcp", srv.Addr().String(), &tls.Config{RootCAs: f.roots,
						ServerName: "localhost", MinVersion: tls.VersionTLS13})
				} else {
					c, err = net.Dial("tcp", srv.Addr().String())
				}
				if err != nil {
					t.Fatal(err)
				}
				_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // a hang guard only
				msg := pattern(i, 100)
				if _, err := c.Write(msg); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(c, got); err != nil {
					t.Fatalf("connection %d: %v", i, err)
				}
				if !bytes.Equal(got, msg) {
					t.Fatalf("connection %d: echo differs", i)
				}
				_ = c.Close()
			}
			if got := srv.eng.readerWakes.Load(); got > tc.maxWakes {
				t.Errorf("%d event-loop wake-ups by StartReader for %d connections, want at most %d", got, conns, tc.maxWakes)
			}
		})
	}
}

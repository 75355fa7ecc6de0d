package aio

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// TestTLSFlightsLeaveFromTheirStep: over loopback, every server flight of
// a full handshake is written to the socket by the goroutine that
// computed it, none through the outbox and the event loop's wake-up
// (tlsflight.go); and a TLS 1.3 handshake whose last step ran on the
// event loop is announced there, without waking the loop again
// (announceOnLoop), while a TLS 1.2 one, whose last step ran on a worker,
// wakes it once. Each flight's buffer goes back to the cipher pools once
// the socket took it. Every handshake completes and its echo comes back.
func TestTLSFlightsLeaveFromTheirStep(t *testing.T) {
	const conns = 12
	for _, tc := range []struct {
		name          string
		version       uint16
		flights       uint64 // per handshake
		announceWakes uint64 // per handshake
	}{
		{"TLS 1.3", tls.VersionTLS13, 1, 0},
		{"TLS 1.2", tls.VersionTLS12, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTLSFixture(t, TLSConfig{})
			closed := make(chan struct{}, conns)
			echo := echoSink(func(*Connection) { closed <- struct{}{} })
			srv, err := Listen(SocketConfig{Addr: "127.0.0.1:0", TLS: &TLSConfig{Config: f.srvCfg}}, echo, Env{Manager: f.m})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			hs, err := TLSHandshakes(f.m, TLSConfig{})
			if err != nil {
				t.Fatal(err)
			}
			flightBufs0 := cipherBufStats.flights.Load()
			cliCfg := &tls.Config{RootCAs: f.roots, ServerName: "localhost", MinVersion: tc.version, MaxVersion: tc.version}
			errs := make(chan error, conns)
			for i := range conns {
				go func() { errs <- echoOver(srv.Addr().String(), cliCfg, i, []int{64}) }()
			}
			for range conns {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			for range conns {
				select {
				case <-closed:
				case <-time.After(30 * time.Second): // a hang guard
					t.Fatal("the server's connections did not all close")
				}
			}
			if st := hs.Stats(); st.Handshakes != conns {
				t.Fatalf("handshakes %+v, want %d completed", st, conns)
			}
			c := &hs.counter
			if got, want := c.flightsDirect.Load(), tc.flights*conns; got != want {
				t.Errorf("flights written by their step: %d, want %d", got, want)
			}
			if got := c.flightsQueued.Load(); got != 0 {
				t.Errorf("flights handed to the event loop: %d, want 0", got)
			}
			if got, want := cipherBufStats.flights.Load()-flightBufs0, tc.flights*conns; got != want {
				t.Errorf("flight buffers given back: %d, want %d", got, want)
			}
			if got, want := c.announceWakes.Load(), tc.announceWakes*conns; got != want {
				t.Errorf("event-loop wake-ups to announce: %d, want %d", got, want)
			}
		})
	}
}

// echoSink accepts connections and echoes every packet back; closed is
// told of each connection's end.
func echoSink(closed func(*Connection)) fnSink {
	var echo fnSink
	echo = func(e sink.Event) error {
		switch v := e.(type) {
		case *Connection:
			return v.StartReader(echo)
		case Packet:
			return v.Conn.Write(v.Data, nil, nil)
		case SinkClosed:
			closed(v.Conn)
		}
		return nil
	}
	return echo
}

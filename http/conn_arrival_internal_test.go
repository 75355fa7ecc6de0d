package http

import (
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

// A packet's arrival reading (aio.Packet.At) stamps what the connection
// times from it: its activity, the start of the request and the
// request's arrival (response timeout, access log Duration), and, while
// the packet is delivered, the connection's reading for replies. Without
// one (0) the clock is read.
func TestPacketArrivalStampsTheRequest(t *testing.T) {
	arrived := sink.Nanotime() - 5e9 // an arrival 5 s ago, unmistakable
	tests := []struct {
		name string
		at   int64
		want func(before, got int64) bool
	}{
		{"packet's reading", arrived, func(_, got int64) bool { return got == arrived }},
		{"no reading", 0, func(before, got int64) bool { return got >= before }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ServerConfig{}.withDefaults()
			cfg.HTTP2.Disable = true // no socket to ask about TLS
			srv := &Server{cfg: cfg}
			c := newConnection(srv, nil)
			var mono int64
			var delivered int
			srv.cfg.Inline = func(*Request) bool {
				mono = c.mono // the inline answer's reading (c.mu is not held here)
				delivered++
				return true
			}
			before := sink.Nanotime()
			if err := c.onPacket([]byte("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"), tc.at, false); err != nil {
				t.Fatal(err)
			}
			if delivered != 1 {
				t.Fatalf("%d requests delivered, want 1", delivered)
			}
			w, ok := c.waitq.Pop()
			if !ok || !tc.want(before, w.at) {
				t.Fatalf("request arrival %d (ok %v), packet's %d, read from %d", w.at, ok, tc.at, before)
			}
			if !tc.want(before, c.lastAct) || !tc.want(before, mono) {
				t.Fatalf("activity %d, delivery reading %d; packet's %d, read from %d", c.lastAct, mono, tc.at, before)
			}
			if c.mono != 0 || !c.wall.IsZero() {
				t.Fatal("the delivery's readings outlive it")
			}
		})
	}
}

package gnutella_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/gnutella"
	"github.com/sandstorm-go/sandstorm/internal/fdtest"
)

// waitFor polls cond; the deadline is a safety net far above what a
// loaded machine needs, not what decides the test.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// gauge reads one of the manager's metrics (0 if it is missing).
func (r *router) gauge(name string) int64 {
	if g, ok := r.m.Metrics().Get(name).(interface{ Value() int64 }); ok {
		return g.Value()
	}
	return 0
}

// TestSurvivesDescriptorExhaustion: while the process has no descriptor
// left, the router's accept fails (counted) and the peers it holds go on
// routing; once descriptors are free, the peer that waited is accepted,
// handshakes and is routed to. A peer that never reads is covered by
// TestSlowPeerClosedAtThreshold.
func TestSurvivesDescriptorExhaustion(t *testing.T) {
	r := startRouter(t, "", "")
	a, b := dialPeer(t, r, "a"), dialPeer(t, r, "b")
	r.waitPeers(t, 2)

	ex := fdtest.Exhaust(t, 1) // one descriptor for the waiting peer
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatalf("dial with the last descriptor: %v", err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, gnutella.Connect); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "accept errors", func() bool { return r.gauge("aio.gnutella.accept.errors") >= 2 })
	m := newID()
	a.send(ping(m, 2))
	a.expect(gnutella.TypePong, m)
	b.expect(gnutella.TypePing, m)
	ex.Restore()

	w := &peer{t: t, name: "waited", c: c, r: bufioReader(c)}
	ok := make([]byte, len(gnutella.OK))
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	if _, err := io.ReadFull(w.r, ok); err != nil || string(ok) != gnutella.OK {
		t.Fatalf("handshake once descriptors are free: %q, %v", ok, err)
	}
	r.waitPeers(t, 3)
	q := newID()
	a.send(query(q, 2, "after"))
	b.expect(gnutella.TypeQuery, q)
	w.expectSkipping(gnutella.TypeQuery, q)
}

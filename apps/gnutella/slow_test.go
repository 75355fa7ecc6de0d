package gnutella_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/gnutella"
)

// A peer that never reads is closed once its unsent output passes the
// connection's threshold (clogPolicy close, thesis §6.2.2), counted, and
// what the router held for it stayed within the threshold plus one
// descriptor; the peers that read go on receiving.
func TestSlowPeerClosedAtThreshold(t *testing.T) {
	const threshold = 64 << 10
	r := startRouter(t, "64KiB", "")
	a, b := dialPeer(t, r, "sender"), dialPeer(t, r, "reader")
	slow := dialPeer(t, r, "never reads")
	slow.c.(*net.TCPConn).SetReadBuffer(4096)
	r.waitPeers(t, 3)
	var slowPeer *gnutella.Peer
	for _, p := range r.node.Peers() {
		if p.Conn().RemoteAddr().String() == slow.c.LocalAddr().String() {
			slowPeer = p
		}
	}
	if slowPeer == nil {
		t.Fatal("slow peer not listed")
	}

	// The reader keeps up: it reads each Query before the next is sent,
	// so only the peer that never reads falls behind.
	search := strings.Repeat("s", 2000)
	sent := 0
	deadline := time.Now().Add(30 * time.Second)
	for r.node.Stats().SlowClosed == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("slow peer never closed after %d queries: %+v", sent, r.node.Stats())
		}
		q := newID()
		a.send(query(q, 2, search))
		b.expect(gnutella.TypeQuery, q)
		sent++
	}
	st := slowPeer.Conn().Stats()
	desc := int64(gnutella.HeaderLen + 2 + len(search) + 1)
	if st.MaxOutstanding > threshold+desc {
		t.Fatalf("held %d bytes for the slow peer, threshold %d", st.MaxOutstanding, threshold)
	}
	r.waitPeers(t, 2)
	m := newID()
	a.send(ping(m, 2))
	a.expect(gnutella.TypePong, m)
	b.expect(gnutella.TypePing, m)
	s := r.node.Stats()
	if s.SlowClosed != 1 || s.Refused == 0 {
		t.Fatalf("stats %+v", s)
	}
	t.Logf("closed after %d queries of %d bytes; held at most %d bytes for it", sent, desc, st.MaxOutstanding)
}

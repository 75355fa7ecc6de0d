package gnutella_test

import (
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/gnutella"
)

// Two routers: the second one's Catcher connects to the first (the
// configured host), runs the handshake as the connecting side, pings the
// network and learns the first router's address from its Pong; a Query
// from a peer of the second router reaches a peer of the first.
func TestCatcherJoinsAndRoutes(t *testing.T) {
	r1 := startRouter(t, "", "")
	r2 := startRouter(t, "", `
  GnutellaCatcher:
    handler: gnutella.Catcher
    args: {hosts: ["`+r1.addr+`"], connections: 2, interval: 10ms, pingEvery: 10ms}
`)
	r1.waitPeers(t, 1)
	r2.waitPeers(t, 1)
	if !r2.node.Peers()[0].Outgoing() || r1.node.Peers()[0].Outgoing() {
		t.Fatal("wrong directions")
	}
	deadline := time.Now().Add(10 * time.Second)
	for r2.node.Stats().HostsLearnt < 1 || r1.node.Stats().Received == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no Ping/Pong between the routers: %+v", r2.node.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}

	a := dialPeer(t, r2, "A")
	b := dialPeer(t, r1, "B")
	r2.waitPeers(t, 2)
	r1.waitPeers(t, 2)
	q := newID()
	a.send(query(q, 3, "far"))
	d := b.expectSkipping(gnutella.TypeQuery, q)
	if d.Hops != 2 || d.TTL != 1 {
		t.Fatalf("ttl %d hops %d", d.TTL, d.Hops)
	}
	b.send(queryHit(q, newID()))
	if h := a.expectSkipping(gnutella.TypeQueryHit, q); h.Hops != 2 {
		t.Fatalf("hops %d", h.Hops)
	}
	// Still exactly one outgoing connection: the only host is r1 (r1's
	// own Pong advertises r1 itself).
	if n := len(r2.node.Peers()); n != 2 {
		t.Fatalf("%d peers", n)
	}
}

package gnutella_test

import (
	"testing"

	"github.com/sandstorm-go/sandstorm/apps/gnutella"
)

// Three peers through the router: a Query is broadcast to the two others
// with TTL decremented and hops incremented; its QueryHit goes back to
// the asker only, and a Push for the answering servent goes back along the
// QueryHit's path.
func TestQueryBroadcastAndHitRoutedBack(t *testing.T) {
	r := startRouter(t, "", "")
	a, b, c := dialPeer(t, r, "A"), dialPeer(t, r, "B"), dialPeer(t, r, "C")
	r.waitPeers(t, 3)

	q := newID()
	a.send(query(q, 3, "seda"))
	for _, p := range []*peer{b, c} {
		d := p.expect(gnutella.TypeQuery, q)
		if d.TTL != 2 || d.Hops != 1 {
			t.Fatalf("%s: forwarded with ttl %d hops %d", p.name, d.TTL, d.Hops)
		}
		if got, _ := gnutella.ParseQuery(d.Payload); got.Search != "seda" {
			t.Fatalf("search %q", got.Search)
		}
	}

	servent := newID()
	c.send(queryHit(q, servent))
	hit := a.expect(gnutella.TypeQueryHit, q)
	if hit.TTL != 6 || hit.Hops != 1 {
		t.Fatalf("QueryHit ttl %d hops %d", hit.TTL, hit.Hops)
	}
	// A marker from C reaches B after anything C sent before it (one
	// routing thread, FIFO): B must see the marker first, so it never got
	// the QueryHit. C's own copy is answered with a Pong.
	marker := newID()
	c.send(ping(marker, 2))
	b.expect(gnutella.TypePing, marker)
	a.expect(gnutella.TypePing, marker)
	c.expect(gnutella.TypePong, marker)

	push := gnutella.Descriptor{Header: gnutella.Header{ID: newID(), Type: gnutella.TypePush, TTL: 7},
		Payload: gnutella.Push{ServentID: servent, Index: 1}.Append(nil)}
	a.send(push)
	c.expect(gnutella.TypePush, push.ID)
	m2 := newID()
	a.send(ping(m2, 2))
	b.expect(gnutella.TypePing, m2) // not the Push
	a.expect(gnutella.TypePong, m2)

	if s := r.node.Stats(); s.Handshakes != 3 || s.Unroutable != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A descriptor seen before is not forwarded again, whichever peer sends it.
func TestDuplicatesDropped(t *testing.T) {
	r := startRouter(t, "", "")
	a, b, c := dialPeer(t, r, "A"), dialPeer(t, r, "B"), dialPeer(t, r, "C")
	r.waitPeers(t, 3)
	q := newID()
	a.send(query(q, 5, "x"))
	b.expect(gnutella.TypeQuery, q)
	c.expect(gnutella.TypeQuery, q)
	a.send(query(q, 5, "x"))
	b.send(query(q, 4, "x"))
	p := newID()
	a.send(ping(p, 3))
	a.expect(gnutella.TypePong, p)
	b.expect(gnutella.TypePing, p)
	c.expect(gnutella.TypePing, p)
	a.send(ping(p, 3))
	m := newID()
	a.send(ping(m, 3))
	a.expect(gnutella.TypePong, m) // no second Pong for the duplicate
	b.expect(gnutella.TypePing, m)
	c.expect(gnutella.TypePing, m)
	if s := r.node.Stats(); s.Duplicates != 3 {
		t.Fatalf("duplicates %d, want 3", s.Duplicates)
	}
}

// A descriptor whose TTL reaches 0 is not forwarded; one that arrives with
// TTL 0 is not handled at all; a TTL above maxTTL is lowered.
func TestTTLExpiry(t *testing.T) {
	r := startRouter(t, "", "")
	a, b := dialPeer(t, r, "A"), dialPeer(t, r, "B")
	r.waitPeers(t, 2)
	a.send(query(newID(), 1, "dies here"))
	a.send(query(newID(), 0, "dead on arrival"))
	p1 := newID()
	a.send(ping(p1, 1)) // answered, not forwarded
	a.expect(gnutella.TypePong, p1)
	big := newID()
	a.send(query(big, 200, "capped"))
	if d := b.expect(gnutella.TypeQuery, big); d.TTL != 6 {
		t.Fatalf("ttl %d, want maxTTL-1 = 6", d.TTL)
	}
	if s := r.node.Stats(); s.Expired != 3 {
		t.Fatalf("expired %d, want 3", s.Expired)
	}
	// A reply nobody asked for has no route.
	a.send(queryHit(newID(), newID()))
	m := newID()
	a.send(ping(m, 2))
	b.expect(gnutella.TypePing, m)
	if s := r.node.Stats(); s.Unroutable != 1 {
		t.Fatalf("unroutable %d, want 1", s.Unroutable)
	}
}

// A peer that sends an oversized, unknown or malformed descriptor, or a
// bad handshake, is closed; the others go on.
func TestBadPeersClosed(t *testing.T) {
	r := startRouter(t, "", "")
	a, b := dialPeer(t, r, "A"), dialPeer(t, r, "B")
	bad := []struct {
		name  string
		bytes []byte
	}{
		{"oversized", gnutella.AppendHeader(nil, gnutella.Header{ID: newID(), Type: gnutella.TypeQuery, TTL: 3, Length: 1 << 30})},
		{"unknown type", gnutella.AppendHeader(nil, gnutella.Header{ID: newID(), Type: 0x33, TTL: 3})},
		{"short pong", append(gnutella.AppendHeader(nil, gnutella.Header{ID: newID(), Type: gnutella.TypePong, TTL: 3, Length: 2}), 1, 2)},
	}
	for i, tt := range bad {
		p := dialPeer(t, r, tt.name)
		r.waitPeers(t, 3)
		if _, err := p.c.Write(tt.bytes); err != nil {
			t.Fatal(err)
		}
		if !p.closedByRouter() {
			t.Fatalf("%s: connection not closed", tt.name)
		}
		r.waitPeers(t, 2)
		if s := r.node.Stats(); s.BadPeers != uint64(i+1) {
			t.Fatalf("%s: bad peers %d", tt.name, s.BadPeers)
		}
	}
	h := newPlain(t, r)
	h.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	if !(&peer{t: t, c: h, r: bufioReader(h)}).closedByRouter() {
		t.Fatal("bad handshake not closed")
	}
	m := newID()
	a.send(ping(m, 2))
	b.expect(gnutella.TypePing, m)
	if s := r.node.Stats(); s.BadPeers != 4 {
		t.Fatalf("bad peers %d, want 4", s.BadPeers)
	}
}

// Past maxPeers (6 here) a connection is closed at its handshake, counted;
// the connected peers go on.
func TestMaxPeers(t *testing.T) {
	r := startRouter(t, "", "")
	var ps []*peer
	for i := 0; i < 6; i++ {
		ps = append(ps, dialPeer(t, r, "peer"))
	}
	r.waitPeers(t, 6)
	c := newPlain(t, r)
	c.Write([]byte(gnutella.Connect))
	if !(&peer{t: t, c: c, r: bufioReader(c)}).closedByRouter() {
		t.Fatal("seventh peer not closed")
	}
	m := newID()
	ps[0].send(ping(m, 2))
	ps[5].expect(gnutella.TypePing, m)
	if s := r.node.Stats(); s.Rejected != 1 || s.Peers != 6 {
		t.Fatalf("stats %+v", s)
	}
}

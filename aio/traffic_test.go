package aio

import (
	"io"
	"net"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

// A reply written while the event loop delivers the request (the reader
// answers inside its Enqueue, as HTTP's Combine path does) is written by
// the loop itself once the delivery is done: no AsyncWrite, one loop
// write per delivery, the bytes whole and in order, every completion
// called. A write from another goroutine afterwards takes AsyncWrite.
func TestRepliesDuringTrafficWrittenByTheLoop(t *testing.T) {
	checkLeaks(t)
	_, _, c, client := serverConn(t, SocketConfig{})
	done := make(chan error, 64)
	echo := replyTwiceSink(c, done)
	if err := c.StartReader(echo); err != nil {
		t.Fatal(err)
	}
	const rounds = 5
	for i := range rounds {
		replyRound(t, client, done, i)
	}
	st := c.Stats()
	if st.LoopWrites != rounds || st.AsyncWrites != 0 {
		t.Fatalf("loop writes %d, async writes %d; want %d and 0", st.LoopWrites, st.AsyncWrites, rounds)
	}

	// Outside a delivery: handed to gnet.
	writeOutsideDelivery(t, c, client, done)
	if st := c.Stats(); st.AsyncWrites != 1 || st.LoopWrites != rounds {
		t.Fatalf("after a write from the test: loop writes %d, async writes %d; want %d and 1", st.LoopWrites, st.AsyncWrites, rounds)
	}
}

// Each event loop yields once every yieldEvery traffic events of its own,
// so that a loop that never blocks is not taken for a long-running
// goroutine. The loops count separately: two connections on two loops
// with fewer than yieldEvery events each make no yield (a count shared by
// the loops would make one).
func TestEventLoopYields(t *testing.T) {
	for _, tc := range []struct {
		name        string
		connections int
		rounds      int // round trips per connection
		yields      uint64
	}{
		{"one loop, three periods", 1, 3*yieldEvery + 1, 3},
		{"two loops, under a period each", 2, yieldEvery * 3 / 4, 0},
		{"two loops, one period each", 2, yieldEvery + 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t)
			_, clients, loops := echoOnEachLoop(t, tc.connections)
			buf := []byte{'x'}
			for range tc.rounds {
				for _, client := range clients {
					if _, err := client.Write(buf); err != nil {
						t.Fatal(err)
					}
					if _, err := io.ReadFull(client, buf); err != nil {
						t.Fatal(err)
					}
				}
			}
			for loop := range loops {
				events, yields := loop.events.Load(), loop.yields.Load()
				if events < uint64(tc.rounds) {
					t.Fatalf("%d traffic events on a loop for %d round trips", events, tc.rounds)
				}
				if want := events / yieldEvery; yields != want || yields != tc.yields {
					t.Fatalf("a loop yielded %d times after %d traffic events, want %d (%d)", yields, events, want, tc.yields)
				}
			}
		})
	}
}

// A packet carries the clock reading the event loop took when its bytes
// arrived: after the client's write, before the reader got it. A reply
// written during the delivery is written by the loop, which records the
// output's progress at that same reading instead of reading the clock.
func TestPacketCarriesArrivalReading(t *testing.T) {
	checkLeaks(t)
	_, _, c, client := serverConn(t, SocketConfig{})
	type stamp struct{ at, got, out int64 }
	got := make(chan stamp, 16)
	if err := c.StartReader(fnSink(func(e sink.Event) error {
		p, ok := e.(Packet)
		if !ok {
			return nil
		}
		s := stamp{at: p.At, got: sink.Nanotime()}
		return c.Write(p.Data, nil, func(error) {
			c.mu.Lock()
			s.out = c.lastOut // set before the completions run
			c.mu.Unlock()
			got <- s
		})
	})); err != nil {
		t.Fatal(err)
	}
	buf := []byte{'x'}
	for i := range 3 {
		before := sink.Nanotime()
		if _, err := client.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(client, buf); err != nil {
			t.Fatal(err)
		}
		s := <-got
		if s.at < before || s.at > s.got {
			t.Fatalf("packet %d: arrival reading %d, want between the write (%d) and its delivery (%d)", i, s.at, before, s.got)
		}
		if s.out != s.at {
			t.Fatalf("packet %d: output progress recorded at %d, want the arrival reading %d", i, s.out, s.at)
		}
	}
	if st := c.Stats(); st.LoopWrites != 3 {
		t.Fatalf("%d loop writes, want 3", st.LoopWrites)
	}
}

// The per-request byte and packet counters are each event loop's own
// (loopTraffic, a cache line per loop): two loops' connections echoing
// bytes leave the socket-wide counters untouched, each loop counts its
// connection's traffic, and SocketStats adds them up.
func TestTrafficCountedPerLoop(t *testing.T) {
	checkLeaks(t)
	srv, clients, loops := echoOnEachLoop(t, 2)
	const rounds, size = 10, 100
	buf := make([]byte, size)
	for range rounds {
		for _, client := range clients {
			if _, err := client.Write(buf); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(client, buf); err != nil {
				t.Fatal(err)
			}
		}
	}
	const want = 2 * rounds * size
	waitCond(t, "the bytes written counted", func() bool { return srv.Stats().BytesOut == want })
	if st := srv.Stats(); st.BytesIn != want || st.Packets < 2*rounds {
		t.Fatalf("stats: %d bytes in, %d packets; want %d bytes, at least %d packets", st.BytesIn, st.Packets, want, 2*rounds)
	}
	for loop := range loops {
		if loop.bytesIn.Load() != want/2 || loop.bytesOut.Load() != want/2 {
			t.Fatalf("a loop counted %d bytes in, %d out; want %d each", loop.bytesIn.Load(), loop.bytesOut.Load(), want/2)
		}
	}
	s := &srv.eng.stats
	if s.bytesIn.Load() != 0 || s.packets.Load() != 0 || s.bytesOut.Load() != 0 {
		t.Fatalf("socket-wide counters written: %d bytes in, %d packets, %d bytes out", s.bytesIn.Load(), s.packets.Load(), s.bytesOut.Load())
	}
}

// echoOnEachLoop starts a server with n event loops and dials n clients,
// one at a time (gnet gives a connection to the loop with the fewest once
// the previous one is registered), each served by an echo reader; it
// fails unless each connection has a loop of its own, and returns the
// server, the clients and the loops' counters.
func echoOnEachLoop(t *testing.T, n int) (*Server, []*net.TCPConn, map[*loopTraffic]bool) {
	t.Helper()
	owner := newRecorder("owner")
	srv := listen(t, SocketConfig{EventLoops: n}, owner)
	clients := make([]*net.TCPConn, n)
	var evs []sink.Event
	for i := range clients {
		clients[i] = dial(t, srv)
		evs = owner.wait(t, "connection", func(evs []sink.Event) bool { return count[*Connection](evs) == i+1 })
	}
	loops := map[*loopTraffic]bool{}
	for _, e := range evs {
		c, ok := e.(*Connection)
		if !ok {
			continue
		}
		loops[c.traffic] = true
		echo := fnSink(func(e sink.Event) error {
			if p, ok := e.(Packet); ok {
				return c.Write(p.Data, nil, nil)
			}
			return nil
		})
		if err := c.StartReader(echo); err != nil {
			t.Fatal(err)
		}
	}
	if len(loops) != n {
		t.Fatalf("%d connections on %d event loops, want one loop each", n, len(loops))
	}
	return srv, clients, loops
}

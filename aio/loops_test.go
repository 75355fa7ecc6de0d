package aio

import (
	"net"
	"sync"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

// loopShares counts the connections among evs on each event loop.
func loopShares(evs []sink.Event) map[*loopTraffic]int {
	shares := map[*loopTraffic]int{}
	for _, e := range evs {
		if c, ok := e.(*Connection); ok {
			shares[c.traffic]++
		}
	}
	return shares
}

// checkEvenShares fails unless the connections are spread evenly over the
// loops.
func checkEvenShares(t *testing.T, shares map[*loopTraffic]int, loops, conns int) {
	t.Helper()
	if len(shares) != loops {
		t.Fatalf("%d connections on %d event loops, want %d loops: %v", conns, len(shares), loops, shares)
	}
	for _, n := range shares {
		if n != conns/loops {
			t.Fatalf("%d connections over %d loops split %v, want %d each", conns, loops, shares, conns/loops)
		}
	}
}

// Connections that arrive together are spread evenly over the event loops
// (each loop takes one in turn), where gnet's own choice, least
// connections counted only once a loop registered one, piled a burst onto
// one loop.
func TestSimultaneousConnectionsSpreadOverLoops(t *testing.T) {
	for _, tc := range []struct{ loops, conns int }{{2, 64}, {4, 64}, {3, 9}} {
		owner := newRecorder("owner")
		srv := listen(t, SocketConfig{EventLoops: tc.loops}, owner)
		start := make(chan struct{})
		var wg sync.WaitGroup
		clients := make([]net.Conn, tc.conns)
		errs := make([]error, tc.conns)
		for i := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				clients[i], errs[i] = net.Dial("tcp", srv.Addr().String())
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("dial %d: %v", i, err)
			}
			defer clients[i].Close()
		}
		evs := owner.wait(t, "connections", func(evs []sink.Event) bool { return count[*Connection](evs) == tc.conns })
		checkEvenShares(t, loopShares(evs), tc.loops, tc.conns)
	}
}

// A Client's connects made together are spread over its loops too.
func TestClientConnectsSpreadOverLoops(t *testing.T) {
	const loops, conns = 2, 32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	cl := newClient(t, SocketConfig{EventLoops: loops})
	owner := newRecorder("owner")
	for range conns {
		if err := cl.Connect(ln.Addr().String(), owner, nil); err != nil {
			t.Fatal(err)
		}
	}
	evs := owner.wait(t, "connections", func(evs []sink.Event) bool { return count[*Connection](evs) == conns })
	checkEvenShares(t, loopShares(evs), loops, conns)
}

package aio

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

func newClient(t *testing.T, cfg SocketConfig) *Client {
	t.Helper()
	cl, err := NewClient(cfg, Env{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Close(); err != nil {
			t.Errorf("client Close: %v", err)
		}
	})
	return cl
}

func TestClientToServerExchange(t *testing.T) {
	checkLeaks(t)
	// Server: echo inline, from the event loop (the sink is non-blocking).
	var echo fnSink
	echo = func(e sink.Event) error {
		switch v := e.(type) {
		case *Connection:
			return v.StartReader(echo)
		case Packet:
			return v.Conn.Enqueue(v.Data)
		}
		return nil
	}
	srv := listen(t, SocketConfig{}, echo)
	cl := newClient(t, SocketConfig{Name: "test-client"})
	owner := newRecorder("client-owner")
	if err := cl.Connect(srv.Addr().String(), owner, "first"); err != nil {
		t.Fatal(err)
	}
	evs := owner.wait(t, "connection", func(evs []sink.Event) bool { return count[*Connection](evs) == 1 })
	c, _ := first[*Connection](evs)
	if c.Value() != "first" {
		t.Fatalf("Value %v, want the value given to Connect", c.Value())
	}
	reader := newRecorder("client-reader")
	if err := c.StartReader(reader); err != nil {
		t.Fatal(err)
	}
	want := pattern(5, 300<<10)
	done := newRecorder("done")
	if err := c.Send(want, done, 1); err != nil {
		t.Fatal(err)
	}
	evs = reader.wait(t, "echo", func(evs []sink.Event) bool { return len(packetBytes(t, evs)) >= len(want) })
	if !bytes.Equal(packetBytes(t, evs), want) {
		t.Fatal("echo differs")
	}
	done.wait(t, "drained", func(evs []sink.Event) bool { return count[SinkDrained](evs) == 1 })
	if s := cl.Stats(); s.Connected != 1 || s.Open != 1 || len(cl.Connections()) != 1 {
		t.Fatalf("client stats %+v", s)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	evs = reader.wait(t, "close", func(evs []sink.Event) bool { return count[SinkClosed](evs) == 1 })
	if sc, _ := first[SinkClosed](evs); sc.Reason != ClosedLocal {
		t.Fatalf("SinkClosed %+v", sc)
	}
}

func TestClientConnectFailed(t *testing.T) {
	checkLeaks(t)
	// A port nobody listens on: take one and release it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cl := newClient(t, SocketConfig{})
	owner := newRecorder("owner")
	if err := cl.Connect(addr, owner, 7); err != nil {
		t.Fatal(err)
	}
	evs := owner.wait(t, "ConnectFailed", func(evs []sink.Event) bool { return count[ConnectFailed](evs) == 1 })
	cf, _ := first[ConnectFailed](evs)
	if cf.Addr != addr || cf.Value != 7 || cf.Err == nil {
		t.Fatalf("ConnectFailed %+v", cf)
	}
	if cl.Stats().ConnectFailed != 1 {
		t.Fatalf("stats %+v", cl.Stats())
	}
	if err := cl.Connect("no-port", owner, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("bad address: %v", err)
	}
	if err := cl.Connect(addr, nil, nil); !errors.Is(err, ErrBadEvent) {
		t.Fatalf("nil sink: %v", err)
	}
}

func TestClientShutdownAndClose(t *testing.T) {
	checkLeaks(t)
	peer := newRecorder("server-owner")
	srv := listen(t, SocketConfig{}, peer)
	cl, err := NewClient(SocketConfig{}, Env{})
	if err != nil {
		t.Fatal(err)
	}
	owner := newRecorder("owner")
	for i := range 3 {
		if err := cl.Connect(srv.Addr().String(), owner, i); err != nil {
			t.Fatal(err)
		}
	}
	evs := owner.wait(t, "connections", func(evs []sink.Event) bool { return count[*Connection](evs) == 3 })
	for _, e := range evs {
		if c, ok := e.(*Connection); ok {
			if err := c.Enqueue([]byte("bye")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cl.Shutdown(ctxTimeout(t)); err != nil {
		t.Fatal(err)
	}
	evs = owner.events()
	if n := count[SinkClosed](evs); n != 3 {
		t.Fatalf("%d SinkClosed, want 3: %s", n, summarize(evs))
	}
	for _, e := range evs {
		if sc, ok := e.(SinkClosed); ok && (sc.Reason != ClosedLocal || sc.Unsent != 0) {
			t.Fatalf("graceful shutdown: %+v", sc)
		}
	}
	if err := cl.Connect(srv.Addr().String(), owner, nil); !errors.Is(err, ErrSocketClosed) {
		t.Fatalf("Connect after Shutdown: %v", err)
	}
	if err := cl.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
}

func TestReadRateGovernorDeliversEverything(t *testing.T) {
	checkLeaks(t)
	// 40 packets/s with a burst of 5: the governor spreads 30 packets of
	// 1 KiB over most of a second; what matters here is that pacing loses
	// and reorders nothing.
	cfg := SocketConfig{ReadBuffer: 1 << 10, ReadRate: RateConfig{Packets: 40, Burst: 125 * time.Millisecond}}
	srv, _, c, client := serverConn(t, cfg)
	reader := newRecorder("reader")
	if err := c.StartReader(reader); err != nil {
		t.Fatal(err)
	}
	want := pattern(6, 30<<10)
	if _, err := client.Write(want); err != nil {
		t.Fatal(err)
	}
	evs := reader.wait(t, "all bytes", func(evs []sink.Event) bool { return len(packetBytes(t, evs)) >= len(want) })
	if !bytes.Equal(packetBytes(t, evs), want) {
		t.Fatal("governed reading lost or reordered bytes")
	}
	if n := count[Packet](evs); n < 30 {
		t.Fatalf("%d packets, want at least 30 of at most 1 KiB", n)
	}
	if srv.Stats().Packets != uint64(count[Packet](evs)) {
		t.Fatalf("stats %+v", srv.Stats())
	}
	// 30 packets against a bucket of 5: the governor must have paused
	// delivery (unless every packet came 25 ms after the one before, which
	// a single 30 KiB write over loopback does not do).
	st := c.Stats()
	if st.GovernorPauses == 0 || srv.Stats().GovernorPauses != st.GovernorPauses {
		t.Fatalf("connection %+v, socket %+v: want governor pauses counted", st, srv.Stats())
	}
	if readGateBuilt && st.ReadStops == 0 {
		t.Fatalf("connection %+v: a governor pause should stop reading the socket", st)
	}
}

func TestPerConnectionGovernor(t *testing.T) {
	checkLeaks(t)
	cfg := SocketConfig{ReadBuffer: 1 << 10, ReadRate: RateConfig{Bytes: 64 << 10, PerConnection: true}}
	owner := newRecorder("owner")
	srv := listen(t, cfg, owner)
	a, b := dial(t, srv), dial(t, srv)
	evs := owner.wait(t, "connections", func(evs []sink.Event) bool { return count[*Connection](evs) == 2 })
	var conns []*Connection
	for _, e := range evs {
		if c, ok := e.(*Connection); ok {
			conns = append(conns, c)
		}
	}
	if conns[0].gov == nil || conns[0].gov == conns[1].gov {
		t.Fatal("PerConnection: want one governor per connection")
	}
	readers := []*recorder{newRecorder("r0"), newRecorder("r1")}
	for i, c := range conns {
		if err := c.StartReader(readers[i]); err != nil {
			t.Fatal(err)
		}
	}
	want := pattern(8, 20<<10)
	for _, c := range []*net.TCPConn{a, b} {
		if _, err := c.Write(want); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range readers {
		evs := r.wait(t, "all bytes", func(evs []sink.Event) bool { return len(packetBytes(t, evs)) >= len(want) })
		if !bytes.Equal(packetBytes(t, evs), want) {
			t.Fatal("bytes differ")
		}
	}
	if srv.Stats().Packets < 40 {
		t.Fatalf("%d packets for 40 KiB in 1 KiB packets", srv.Stats().Packets)
	}
	// 20 KiB per connection against buckets of 6.4 KiB: each connection's
	// own governor paused it.
	var sum uint64
	for i, c := range conns {
		n := c.Stats().GovernorPauses
		if n == 0 {
			t.Errorf("connection %d was never paused by its governor", i)
		}
		sum += n
	}
	if got := srv.Stats().GovernorPauses; got != sum {
		t.Errorf("socket counts %d governor pauses, connections %d", got, sum)
	}
}

package aio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// echoHandler is an application stage: it starts reading every connection
// it is given and writes every packet back.
type echoHandler struct {
	self sink.Sink
}

func (h *echoHandler) Init(c *stage.Context) error {
	h.self = c.Stage().Sink()
	return nil
}

func (h *echoHandler) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		switch v := e.(type) {
		case *Connection:
			if err := v.StartReader(h.self); err != nil {
				return err
			}
		case Packet:
			if err := v.Conn.Enqueue(v.Data); err != nil {
				return err
			}
		}
	}
	return nil
}

func startEchoStage(t *testing.T) (*stage.Manager, *stage.Stage) {
	t.Helper()
	m := stage.NewManager(stage.Options{})
	// One worker: with two, a connection's two packets could be echoed
	// by two workers at once and leave in either order (Packet is not a
	// stage.Keyed event, so no ordering holds them in sequence).
	st, err := m.CreateStage("Echo", &echoHandler{}, stage.StageConfig{ThreadPool: stage.ThreadPoolConfig{Min: 1, Max: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctxTimeout(t)); err != nil {
		t.Fatal(err)
	}
	return m, st
}

func TestEchoThousandConnections(t *testing.T) {
	checkLeaks(t)
	m, st := startEchoStage(t)
	srv, err := Listen(SocketConfig{Addr: "127.0.0.1:0", Name: "echo", EventLoops: 2}, st.Sink(), Env{Manager: m})
	if err != nil {
		t.Fatal(err)
	}
	const conns, size = 1000, 4096
	var wg, dialed sync.WaitGroup
	errs := make(chan error, conns)
	start := make(chan struct{})
	dialed.Add(conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", srv.Addr().String(), waitLimit)
			dialed.Done()
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			<-start // every connection is open before any echo begins
			want := pattern(i, size)
			// Two writes, so that packets split anywhere.
			if _, err := c.Write(want[:size/3]); err != nil {
				errs <- err
				return
			}
			if _, err := c.Write(want[size/3:]); err != nil {
				errs <- err
				return
			}
			got := make([]byte, size)
			if _, err := io.ReadFull(c, got); err != nil {
				errs <- fmt.Errorf("conn %d: %w", i, err)
				return
			}
			if !bytes.Equal(got, want) {
				errs <- fmt.Errorf("conn %d: echo differs", i)
			}
		}()
	}
	dialed.Wait()
	waitCond(t, "all connections open at once", func() bool { return len(errs) > 0 || srv.Stats().Open == conns })
	if s := srv.Stats(); s.Open != conns || s.Accepted != conns {
		t.Errorf("stats %+v: want all %d connections open at once", s, conns)
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitCond(t, "all connections closed", func() bool { return srv.Stats().Closed == conns })
	s := srv.Stats()
	if s.Accepted != conns || s.BytesIn != conns*size || s.BytesOut != conns*size || s.Open != 0 {
		t.Errorf("stats %+v, want %d accepted, %d bytes each way", s, conns, conns*size)
	}
	if g := m.Metrics().Get("aio.echo.bytes.in"); g == nil {
		t.Error("metrics not registered in the manager's registry")
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if g := m.Metrics().Get("aio.echo.bytes.in"); g != nil {
		t.Error("metrics still registered after Close")
	}
	if err := m.Shutdown(ctxTimeout(t)); err != nil {
		t.Fatal(err)
	}
}

func TestListenEventsAndFailure(t *testing.T) {
	checkLeaks(t)
	rec := newRecorder("owner")
	srv := listen(t, SocketConfig{}, rec)
	ls, ok := first[ListenSucceeded](rec.events())
	if !ok || ls.Server != srv || ls.Addr == nil || ls.Addr.(*net.TCPAddr).Port == 0 {
		t.Fatalf("want ListenSucceeded with the bound port first, got %s", summarize(rec.events()))
	}
	// The same port again fails, with an event and an error.
	rec2 := newRecorder("second")
	_, err := Listen(SocketConfig{Addr: srv.Addr().String()}, rec2, Env{})
	if err == nil {
		t.Fatal("second Listen on a busy port succeeded")
	}
	if lf, ok := first[ListenFailed](rec2.events()); !ok || lf.Err == nil {
		t.Fatalf("want ListenFailed, got %s", summarize(rec2.events()))
	}
	// Bad addresses fail up front.
	for _, addr := range []string{"", "nohostport", "udp://127.0.0.1:1", "unix://"} {
		if _, err := Listen(SocketConfig{Addr: addr}, newRecorder("bad"), Env{}); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Listen(%q): err %v, want ErrInvalidConfig", addr, err)
		}
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "ServerClosed", func(evs []sink.Event) bool { return count[ServerClosed](evs) == 1 })
}

// serverConn listens, dials one client and returns the server side.
func serverConn(t *testing.T, cfg SocketConfig) (*Server, *recorder, *Connection, *net.TCPConn) {
	t.Helper()
	owner := newRecorder("owner")
	srv := listen(t, cfg, owner)
	client := dial(t, srv)
	evs := owner.wait(t, "connection", func(evs []sink.Event) bool { return count[*Connection](evs) == 1 })
	c, _ := first[*Connection](evs)
	return srv, owner, c, client
}

func TestPipelinedLargeWritesCompleteInOrder(t *testing.T) {
	checkLeaks(t)
	_, _, c, client := serverConn(t, SocketConfig{WriteThreshold: WriteThreshold{Bytes: -1}})
	done := newRecorder("done")
	const writes, size = 24, 512 << 10 // 12 MiB, far beyond gnet's 64 KiB buffers
	var want bytes.Buffer
	for i := range writes {
		p := pattern(i, size)
		want.Write(p)
		var err error
		if i%3 == 0 {
			// writev: the request split in three buffers
			err = c.Enqueue(WriteRequest{Data: p[:100], Bufs: [][]byte{p[100 : size/2], p[size/2:]}, Done: done, Tag: i})
		} else {
			err = c.Enqueue(WriteRequest{Data: p, Done: done, Tag: i})
		}
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("received bytes differ from the pipelined writes")
	}
	evs := done.wait(t, "all completions", func(evs []sink.Event) bool { return len(evs) == writes })
	for i, e := range evs {
		d, ok := e.(SinkDrained)
		if !ok || d.Tag != i || d.Bytes != size || d.Conn != c {
			t.Fatalf("completion %d: %#v, want SinkDrained tag %d", i, e, i)
		}
	}
	if st := c.Stats(); st.BytesFlushed != writes*size || st.Outstanding != 0 || st.PendingWrites != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestCloseAfterWriteDeliversEverything(t *testing.T) {
	checkLeaks(t)
	// A small kernel send buffer keeps most of the output in gnet's buffer
	// when the close is requested. (The client keeps its default buffer:
	// windows below two segments stall on delayed ACKs.)
	_, owner, c, client := serverConn(t, SocketConfig{SendBuffer: 128 << 10, WriteThreshold: WriteThreshold{Bytes: -1}})
	const total = 4 << 20
	want := pattern(7, total)
	for off := 0; off < total; off += 256 << 10 {
		if err := c.Enqueue(want[off : off+256<<10]); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Enqueue(CloseRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Enqueue([]byte("late")); !errors.Is(err, sink.ErrClosed) || !errors.Is(err, ErrConnClosed) {
		t.Fatalf("write after Close: %v, want ErrClosed", err)
	}
	got, err := io.ReadAll(client) // until the server's FIN
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want %d (identical)", len(got), total)
	}
	evs := owner.wait(t, "SinkClosed", func(evs []sink.Event) bool { return count[SinkClosed](evs) == 1 })
	sc, _ := first[SinkClosed](evs)
	if sc.Reason != ClosedLocal || sc.Err != nil || sc.Unsent != 0 || sc.Conn != c {
		t.Fatalf("SinkClosed %+v, want local, nothing unsent", sc)
	}
}

func TestSlowPeerClogged(t *testing.T) {
	for _, policy := range []ClogPolicy{ClogClose, ClogReject} {
		t.Run(string(policy), func(t *testing.T) {
			checkLeaks(t)
			const limit = 256 << 10
			cfg := SocketConfig{
				SendBuffer:     8 << 10,
				WriteThreshold: WriteThreshold{Bytes: limit},
				ClogPolicy:     policy,
			}
			_, owner, c, client := serverConn(t, cfg)
			if err := client.SetReadBuffer(8 << 10); err != nil {
				t.Fatal(err)
			}
			chunk := pattern(1, 32<<10)
			var refusal error
			// The peer never reads: eventually the threshold refuses.
			for i := 0; i < 100000 && refusal == nil; i++ {
				refusal = c.Enqueue(chunk)
				if refusal == nil && i%16 == 15 {
					// Let the event loop push bytes to the kernel so
					// that the refusal comes from a full pipe.
					_ = c.Flush(newRecorder("flush"), nil)
				}
			}
			if !errors.Is(refusal, sink.ErrRejected) || !errors.Is(refusal, ErrClogged) {
				t.Fatalf("refusal %v, want ErrRejected and ErrClogged", refusal)
			}
			st := c.Stats()
			if st.MaxOutstanding > limit+int64(len(chunk)) {
				t.Errorf("outstanding reached %d, bound is %d", st.MaxOutstanding, limit+len(chunk))
			}
			owner.wait(t, "SinkClogged", func(evs []sink.Event) bool { return count[SinkClogged](evs) == 1 })
			if policy == ClogClose {
				evs := owner.wait(t, "SinkClosed", func(evs []sink.Event) bool { return count[SinkClosed](evs) == 1 })
				sc, _ := first[SinkClosed](evs)
				if sc.Reason != ClosedClogged || !errors.Is(sc.Err, ErrClogged) || sc.Unsent <= 0 {
					t.Fatalf("SinkClosed %+v, want clogged with unsent bytes", sc)
				}
				return
			}
			// Reject: the connection stays open; once the peer reads, the
			// episode ends and writes are accepted again.
			if n := count[SinkClosed](owner.events()); n != 0 {
				t.Fatal("ClogReject closed the connection")
			}
			go io.Copy(io.Discard, client)
			flushed := newRecorder("flushed")
			waitCond(t, "writes accepted again", func() bool { return c.Enqueue([]byte("x")) == nil })
			if err := c.Flush(flushed, "f"); err != nil {
				t.Fatal(err)
			}
			flushed.wait(t, "flush", func(evs []sink.Event) bool { return count[SinkDrained](evs) == 1 })
			st = c.Stats()
			if n := count[SinkClogged](owner.events()); n < 1 || uint64(n) != st.Clogs || st.RefusedWrites < st.Clogs {
				t.Fatalf("%d SinkClogged events, stats %+v: want one event per episode", n, st)
			}
		})
	}
}

func TestWriteThresholdCountsRequests(t *testing.T) {
	checkLeaks(t)
	_, owner, c, client := serverConn(t, SocketConfig{SendBuffer: 4 << 10, WriteThreshold: WriteThreshold{Writes: 4, Bytes: -1}})
	_ = client.SetReadBuffer(4 << 10)
	big := pattern(2, 1<<20) // stays outstanding: the peer does not read
	if err := c.Enqueue(big); err != nil {
		t.Fatal(err)
	}
	waitCond(t, "the big write to be outstanding", func() bool { return c.Stats().BytesFlushed > 0 })
	// Three more requests fit (4 outstanding); the next is refused.
	for i := 1; i <= 3; i++ {
		if err := c.Enqueue([]byte("x")); err != nil {
			t.Fatalf("request %d of 4 refused: %v", i+1, err)
		}
	}
	if err := c.Enqueue([]byte("x")); !errors.Is(err, ErrClogged) {
		t.Fatalf("5th outstanding request: %v, want ErrClogged", err)
	}
	if c.Len() != 4 {
		t.Fatalf("Len %d, want 4 uncompleted requests", c.Len())
	}
	owner.wait(t, "SinkClogged", func(evs []sink.Event) bool { return count[SinkClogged](evs) == 1 })
}

func TestFlushDoesNotCountAsWrite(t *testing.T) {
	checkLeaks(t)
	srv, owner, c, client := serverConn(t, SocketConfig{SendBuffer: 4 << 10, WriteThreshold: WriteThreshold{Writes: 4, Bytes: -1}, ClogPolicy: ClogClose})
	_ = client.SetReadBuffer(4 << 10)
	if err := c.Enqueue(pattern(2, 1<<20)); err != nil { // stays outstanding: the peer does not read
		t.Fatal(err)
	}
	waitCond(t, "the big write to be outstanding", func() bool { return c.Stats().BytesFlushed > 0 })
	flushed := newRecorder("flushed")
	// Flushes in between use up none of the four requests…
	mustOK(t, c.Flush(flushed, 1))
	mustOK(t, c.Flush(flushed, 2))
	for i := 1; i <= 3; i++ {
		if err := c.Enqueue([]byte("x")); err != nil {
			t.Fatalf("request %d of 4 refused after two flushes: %v", i+1, err)
		}
	}
	// …and at the limit a Flush is accepted: under ClogClose, it does not
	// close the connection.
	mustOK(t, c.Flush(flushed, 3))
	if st := c.Stats(); st.Closed || st.Clogs != 0 || srv.Stats().CloggedClosed != 0 {
		t.Fatalf("stats %+v, socket %+v: a Flush clogged the connection", st, srv.Stats())
	}
	// A fifth write is still refused (and closes, by policy).
	if err := c.Enqueue([]byte("x")); !errors.Is(err, ErrClogged) {
		t.Fatalf("5th outstanding write: %v, want ErrClogged", err)
	}
	evs := flushed.wait(t, "the flushes to fail with the close", func(evs []sink.Event) bool { return len(evs) == 3 })
	for i, e := range evs {
		if wf, ok := e.(WriteFailed); !ok || wf.Tag != i+1 {
			t.Fatalf("flush completion %d: %#v, want WriteFailed tag %d", i, e, i+1)
		}
	}
	owner.wait(t, "SinkClosed", func(evs []sink.Event) bool { return count[SinkClosed](evs) == 1 })
}

func TestReaderRejectionPausesWithoutLoss(t *testing.T) {
	checkLeaks(t)
	_, _, c, client := serverConn(t, SocketConfig{ReadBuffer: 4 << 10})
	reader := newRecorder("reader")
	// Refuse two packets out of three: every refusal pauses the connection
	// until a retry is accepted.
	var attempts int
	reader.setReject(func(e sink.Event) bool {
		if _, ok := e.(Packet); !ok {
			return false
		}
		attempts++
		return attempts%3 != 0
	})
	if err := c.StartReader(reader); err != nil {
		t.Fatal(err)
	}
	if err := c.StartReader(reader); !errors.Is(err, ErrReaderStarted) {
		t.Fatalf("second StartReader: %v", err)
	}
	const total = 512 << 10
	want := pattern(3, total)
	if _, err := client.Write(want); err != nil {
		t.Fatal(err)
	}
	evs := reader.wait(t, "all bytes", func(evs []sink.Event) bool { return len(packetBytes(t, evs)) >= total })
	if got := packetBytes(t, evs); !bytes.Equal(got, want) {
		t.Fatal("bytes lost or reordered across rejections")
	}
	st := c.Stats()
	if st.RejectedReads == 0 || st.BytesIn != total {
		t.Fatalf("stats %+v: want rejections and %d bytes in", st, total)
	}
	// The peer closes: SinkClosed comes after the last packet.
	client.Close()
	evs = reader.wait(t, "SinkClosed", func(evs []sink.Event) bool { return count[SinkClosed](evs) == 1 })
	if sc, ok := evs[len(evs)-1].(SinkClosed); !ok || sc.Reason != ClosedPeer || !errors.Is(sc.Err, io.EOF) {
		t.Fatalf("last event %#v, want SinkClosed{peer, EOF}", evs[len(evs)-1])
	}
}

// TestSlowReaderStopsSocketReading streams 4 MiB, four times MaxInbound,
// through a reader sink that rejects two packets in three and echoes the
// ones it accepts. The connection must stop reading its socket while
// delivery waits (TCP flow control then holds the peer back), also while
// its own output fills and drains, instead of piling the bytes up in
// gnet's inbound buffer until MaxInbound closes it.
func TestSlowReaderStopsSocketReading(t *testing.T) {
	needReadGate(t)
	checkLeaks(t)
	srv, _, c, client := serverConn(t, SocketConfig{ReadBuffer: 64 << 10})
	reader := newRecorder("reader")
	attempts := 0 // guarded by reader.mu
	reader.setReject(func(e sink.Event) bool {
		if _, ok := e.(Packet); !ok {
			return false
		}
		attempts++
		return attempts%3 != 0
	})
	echoErrs := make(chan error, 1)
	reader.mu.Lock()
	reader.on = func(e sink.Event) {
		if p, ok := e.(Packet); ok {
			if err := p.Conn.Enqueue(p.Data); err != nil {
				select {
				case echoErrs <- err:
				default:
				}
			}
		}
	}
	reader.mu.Unlock()
	if err := c.StartReader(reader); err != nil {
		t.Fatal(err)
	}
	const total = 4 * DefaultMaxInbound
	want := pattern(11, total)
	wrote := make(chan error, 1)
	go func() { _, err := client.Write(want); wrote <- err }()
	echoed := make(chan []byte, 1)
	go func() {
		got := make([]byte, total)
		n, _ := io.ReadFull(client, got)
		echoed <- got[:n]
	}()
	evs := reader.wait(t, "all bytes or a close", func(evs []sink.Event) bool {
		return count[SinkClosed](evs) > 0 || len(packetBytes(t, evs)) >= total
	})
	if sc, ok := first[SinkClosed](evs); ok {
		t.Fatalf("connection closed after %d of %d bytes: %+v", len(packetBytes(t, evs)), total, sc)
	}
	if got := packetBytes(t, evs); !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want %d, identical and in order", len(got), total)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("client write: %v", err)
	}
	if got := <-echoed; !bytes.Equal(got, want) {
		t.Fatalf("echo: got %d bytes, want %d, identical and in order", len(got), total)
	}
	select {
	case err := <-echoErrs:
		t.Fatalf("echo write refused: %v", err)
	default:
	}
	st := c.Stats()
	if st.Closed || st.BytesIn != total || st.RejectedReads == 0 {
		t.Fatalf("stats %+v: want open, %d bytes in, rejections", st, total)
	}
	if st.ReadStops == 0 || st.MaxUnread > DefaultMaxInbound/4 {
		t.Fatalf("stats %+v: want reading stopped and little left unread in gnet's buffer", st)
	}
	if s := srv.Stats(); s.OverflowClosed != 0 || s.ReadStops != st.ReadStops || s.PauseUnsupported != 0 {
		t.Fatalf("socket stats %+v", s)
	}
}

// needReadGate skips a test of InboundPause's stopped reading in a build
// that cannot stop reading (not Linux, or gnet's poll_opt poller).
func needReadGate(t *testing.T) {
	t.Helper()
	if !readGateBuilt {
		t.Skip("this build cannot stop reading sockets (InboundPause falls back to MaxInbound)")
	}
}

func TestPeerClosesBeforeStartReader(t *testing.T) {
	checkLeaks(t)
	srv, owner, c, client := serverConn(t, SocketConfig{})
	if _, err := client.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	client.Close()
	waitCond(t, "the connection to close", func() bool { return srv.Stats().Closed == 1 })
	if n := count[SinkClosed](owner.events()); n != 0 {
		t.Fatalf("SinkClosed delivered before StartReader while bytes wait")
	}
	reader := newRecorder("reader")
	if err := c.StartReader(reader); err != nil {
		t.Fatal(err)
	}
	evs := reader.wait(t, "SinkClosed", func(evs []sink.Event) bool { return count[SinkClosed](evs) == 1 })
	if got := string(packetBytes(t, evs)); got != "GET / HTTP/1.0\r\n\r\n" {
		t.Fatalf("late reader got %q", got)
	}
	if _, ok := evs[len(evs)-1].(SinkClosed); !ok {
		t.Fatal("SinkClosed is not the last event")
	}
}

func TestIdleTimeout(t *testing.T) {
	checkLeaks(t)
	srv, owner, _, _ := serverConn(t, SocketConfig{IdleTimeout: 30 * time.Millisecond})
	evs := owner.wait(t, "idle close", func(evs []sink.Event) bool { return count[SinkClosed](evs) == 1 })
	sc, _ := first[SinkClosed](evs)
	if sc.Reason != ClosedIdle || !errors.Is(sc.Err, ErrIdleTimeout) {
		t.Fatalf("SinkClosed %+v, want idle", sc)
	}
	if srv.Stats().IdleClosed != 1 {
		t.Fatalf("stats %+v", srv.Stats())
	}
}

func TestStoppedReaderIsNotIdle(t *testing.T) {
	checkLeaks(t)
	needReadGate(t)
	srv, _, c, client := serverConn(t, SocketConfig{ReadBuffer: 4 << 10})
	reader := newRecorder("reader")
	reader.setReject(func(e sink.Event) bool { _, ok := e.(Packet); return ok })
	if err := c.StartReader(reader); err != nil {
		t.Fatal(err)
	}
	go client.Write(pattern(6, 256<<10)) // blocks once the server stops reading
	waitCond(t, "reading to stop", func() bool { return c.Stats().ReadStopped })
	// The peer is quiet because the application is behind: an idle check
	// an hour later leaves the connection open…
	srv.eng.closeIdle(sink.Nanotime() + int64(time.Hour))
	if st := c.Stats(); st.Closed || srv.Stats().IdleClosed != 0 {
		t.Fatalf("stats %+v: a connection waiting for its reader was closed as idle", st)
	}
	// …and, had it been idle, the same check would have closed it.
	_, _, idle, _ := serverConn(t, SocketConfig{})
	idle.eng.closeIdle(sink.Nanotime() + int64(time.Hour))
	waitCond(t, "the idle connection to close", func() bool { return idle.Stats().Closed })
}

func TestInboundOverflowWithoutReader(t *testing.T) {
	checkLeaks(t)
	// InboundClose: gnet keeps reading, MaxInbound sheds the peer.
	srv, owner, _, client := serverConn(t, SocketConfig{MaxInbound: 64 << 10, InboundPolicy: InboundClose})
	go client.Write(pattern(4, 1<<20)) // fails once the server closes
	evs := owner.wait(t, "overflow close", func(evs []sink.Event) bool { return count[SinkClosed](evs) == 1 })
	sc, _ := first[SinkClosed](evs)
	if sc.Reason != ClosedOverflow || !errors.Is(sc.Err, ErrInboundOverflow) || sc.Unread <= 64<<10 {
		t.Fatalf("SinkClosed %+v, want overflow reporting the unread bytes", sc)
	}
	if s := srv.Stats(); s.OverflowClosed != 1 || s.ReadStops != 0 || s.PauseUnsupported != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestInboundPauseWithoutReader(t *testing.T) {
	needReadGate(t)
	checkLeaks(t)
	// InboundPause (the default): before StartReader the connection reads
	// one read buffer's worth and stops; the peer's bytes wait in the
	// kernel, however many more than MaxInbound it sends.
	const maxInbound, total = 64 << 10, 1 << 20
	srv, owner, c, client := serverConn(t, SocketConfig{ReadBuffer: 4 << 10, MaxInbound: maxInbound})
	want := pattern(5, total)
	wrote := make(chan error, 1)
	go func() { _, err := client.Write(want); wrote <- err }()
	waitCond(t, "reading to stop", func() bool { st := c.Stats(); return st.ReadStopped || st.Closed })
	reader := newRecorder("reader")
	if err := c.StartReader(reader); err != nil {
		t.Fatal(err)
	}
	evs := reader.wait(t, "all bytes or a close", func(evs []sink.Event) bool {
		return count[SinkClosed](evs) > 0 || len(packetBytes(t, evs)) >= total
	})
	if got := packetBytes(t, evs); !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes (%s), want %d, identical and in order", len(got), summarize(evs[len(evs)-1:]), total)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("client write: %v", err)
	}
	st := c.Stats()
	if st.ReadStops == 0 || st.MaxUnread > maxInbound || st.Closed {
		t.Fatalf("stats %+v: want reading stopped, at most MaxInbound unread, open", st)
	}
	if s := srv.Stats(); s.OverflowClosed != 0 || count[SinkClosed](owner.events()) != 0 {
		t.Fatalf("stats %+v, events %s", s, summarize(owner.events()))
	}
}

func TestSuspendAndResumeAccept(t *testing.T) {
	checkLeaks(t)
	owner := newRecorder("owner")
	srv := listen(t, SocketConfig{}, owner)
	srv.SuspendAccept()
	c := dial(t, srv)
	// The server closes it at once: the client reads EOF.
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read on a refused connection: %d, %v; want EOF", n, err)
	}
	if s := srv.Stats(); s.RejectedAccepts != 1 || s.Accepted != 0 {
		t.Fatalf("stats %+v", s)
	}
	srv.ResumeAccept()
	dial(t, srv)
	owner.wait(t, "connection", func(evs []sink.Event) bool { return count[*Connection](evs) == 1 })
}

func TestRejectedConnectionEventClosesConnection(t *testing.T) {
	checkLeaks(t)
	owner := newRecorder("owner")
	owner.setReject(func(e sink.Event) bool { _, ok := e.(*Connection); return ok })
	srv := listen(t, SocketConfig{}, owner)
	c := dial(t, srv)
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("want EOF on a connection the application refused, got %v", err)
	}
	if s := srv.Stats(); s.RejectedAccepts != 1 {
		t.Fatalf("stats %+v", s)
	}
	waitCond(t, "close", func() bool { return srv.Stats().Closed == 1 })
	if n := count[SinkClosed](owner.events()); n != 0 {
		t.Fatal("SinkClosed for a connection nobody saw")
	}
}

func TestManagerShutdownStopsAccepting(t *testing.T) {
	checkLeaks(t)
	m := stage.NewManager(stage.Options{})
	if err := m.Start(ctxTimeout(t)); err != nil {
		t.Fatal(err)
	}
	srv := listen(t, SocketConfig{}, newRecorder("owner"), Env{Manager: m})
	if err := m.Shutdown(ctxTimeout(t)); err != nil {
		t.Fatal(err)
	}
	if !srv.Suspended() {
		t.Fatal("server still accepting after the manager's ShutdownStarted")
	}
}

func TestServerShutdownDrainsConnections(t *testing.T) {
	checkLeaks(t)
	srv, owner, c, client := serverConn(t, SocketConfig{SendBuffer: 128 << 10, WriteThreshold: WriteThreshold{Bytes: -1}})
	want := pattern(9, 2<<20)
	if err := c.Enqueue(want); err != nil {
		t.Fatal(err)
	}
	var got []byte
	var rerr error
	read := make(chan struct{})
	go func() { got, rerr = io.ReadAll(client); close(read) }()
	if err := srv.Shutdown(ctxTimeout(t)); err != nil {
		t.Fatal(err)
	}
	<-read
	if rerr != nil || !bytes.Equal(got, want) {
		t.Fatalf("client got %d bytes (%v), want %d", len(got), rerr, len(want))
	}
	evs := owner.events()
	if sc, _ := first[SinkClosed](evs); sc.Reason != ClosedLocal {
		t.Fatalf("SinkClosed %+v", sc)
	}
	if _, ok := evs[len(evs)-1].(ServerClosed); !ok {
		t.Fatalf("last event %T, want ServerClosed", evs[len(evs)-1])
	}
}

func TestServerCloseReportsUnsentAndFailedWrites(t *testing.T) {
	checkLeaks(t)
	srv, owner, c, client := serverConn(t, SocketConfig{SendBuffer: 4 << 10, WriteThreshold: WriteThreshold{Bytes: -1}})
	_ = client.SetReadBuffer(4 << 10)
	done := newRecorder("done")
	if err := c.Enqueue(WriteRequest{Data: pattern(1, 4<<20), Done: done, Tag: "big"}); err != nil {
		t.Fatal(err)
	}
	waitCond(t, "the write to start", func() bool { return c.Stats().BytesFlushed > 0 })
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	evs := done.events()
	wf, ok := first[WriteFailed](evs)
	if !ok || wf.Tag != "big" || !errors.Is(wf.Err, ErrConnClosed) {
		t.Fatalf("completion %s, want WriteFailed", summarize(evs))
	}
	sc, _ := first[SinkClosed](owner.events())
	if sc.Reason != ClosedShutdown || !errors.Is(sc.Err, ErrSocketClosed) || sc.Unsent <= 0 {
		t.Fatalf("SinkClosed %+v, want shutdown with unsent bytes", sc)
	}
}

func TestConnectionSinkContract(t *testing.T) {
	checkLeaks(t)
	_, _, c, client := serverConn(t, SocketConfig{})
	// Unsupported events are refused, not dropped.
	if err := c.Enqueue(42); !errors.Is(err, ErrBadEvent) {
		t.Fatalf("Enqueue(42): %v", err)
	}
	// EnqueueMany is all or nothing: a bad event in the batch sends nothing.
	if err := c.EnqueueMany([]sink.Event{[]byte("a"), 3}); !errors.Is(err, ErrBadEvent) {
		t.Fatal(err)
	}
	if err := c.EnqueueMany([]sink.Event{CloseRequest{}, []byte("a")}); !errors.Is(err, ErrBadEvent) {
		t.Fatal("CloseRequest before the end of a batch accepted")
	}
	// Empty writes are accepted and leave nothing pending.
	if err := c.EnqueueMany([]sink.Event{[]byte{}, WriteRequest{}}); err != nil || c.Len() != 0 {
		t.Fatalf("empty writes: %v, Len %d", err, c.Len())
	}
	// A predicate refuses with ErrRejected.
	c.SetPredicate(sink.PredicateFunc(func(e sink.Event) bool { b, ok := e.([]byte); return !ok || string(b) != "spam" }))
	if err := c.Enqueue([]byte("spam")); !errors.Is(err, sink.ErrRejected) {
		t.Fatalf("predicate: %v", err)
	}
	if c.Predicate() == nil {
		t.Fatal("Predicate() lost")
	}
	c.SetPredicate(nil)
	// Prepare/Abort sends nothing; Prepare/Commit sends.
	txn, err := c.Prepare([]sink.Event{[]byte("aborted")})
	if err != nil {
		t.Fatal(err)
	}
	txn.Abort()
	txn, err = c.Prepare([]sink.Event{[]byte("he"), WriteRequest{Data: []byte("ll")}})
	if err != nil {
		t.Fatal(err)
	}
	txn.Commit()
	txn.Commit() // idempotent
	if err := c.EnqueueMany([]sink.Event{[]byte("o"), &WriteRequest{Bufs: [][]byte{[]byte(" w"), []byte("orld")}}}); err != nil {
		t.Fatal(err)
	}
	if !c.EnqueueLossy([]byte("!")) {
		t.Fatal("EnqueueLossy refused")
	}
	if err := c.Send([]byte("?"), nil, nil); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("hello world!?"))
	if _, err := io.ReadFull(client, got); err != nil || string(got) != "hello world!?" {
		t.Fatalf("got %q, %v", got, err)
	}
	c.SetValue("state")
	if c.Value() != "state" || c.RemoteAddr() == nil || c.LocalAddr() == nil || c.ID() == 0 {
		t.Fatal("accessors")
	}
	if err := c.Abort(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after Abort the client reads %v", err)
	}
	if err := c.Flush(newRecorder("f"), nil); !errors.Is(err, sink.ErrClosed) {
		t.Fatalf("Flush after close: %v", err)
	}
}

func TestMetricsOfSameNamedSocketsDoNotCollide(t *testing.T) {
	checkLeaks(t)
	reg := metrics.NewRegistry()
	cfg, env := SocketConfig{Name: "twin"}, Env{Metrics: reg}
	a := listen(t, cfg, newRecorder("a"), env)
	b := listen(t, cfg, newRecorder("b"), env)
	if a.MetricsPrefix() != "aio.twin" || b.MetricsPrefix() != "aio.twin-2" {
		t.Fatalf("prefixes %q and %q, want aio.twin and aio.twin-2", a.MetricsPrefix(), b.MetricsPrefix())
	}
	accepted := func(prefix string) int64 {
		t.Helper()
		g, ok := reg.Get(prefix + ".connections.accepted").(metrics.Gauge)
		if !ok {
			t.Fatalf("%s.connections.accepted not registered", prefix)
		}
		return g.Value()
	}
	dial(t, b)
	waitCond(t, "b to accept", func() bool { return b.Stats().Accepted == 1 })
	if accepted("aio.twin") != 0 || accepted("aio.twin-2") != 1 {
		t.Fatalf("accepted: twin %d, twin-2 %d; want each socket's own count (0, 1)", accepted("aio.twin"), accepted("aio.twin-2"))
	}
	// Closing one leaves the other's metrics registered.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if reg.Get("aio.twin-2.connections.accepted") != nil || accepted("aio.twin") != 0 {
		t.Fatal("closing b removed a's metrics or left its own")
	}
	// The freed prefix is taken again.
	c := listen(t, cfg, newRecorder("c"), env)
	if c.MetricsPrefix() != "aio.twin-2" {
		t.Fatalf("third socket's prefix %q, want aio.twin-2", c.MetricsPrefix())
	}
}

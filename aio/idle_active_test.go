package aio

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// The idle check closes quiet connections only: one whose peer has just
// sent something is kept, and the same check an idle timeout later
// closes it.
func TestActiveConnectionIsNotIdle(t *testing.T) {
	checkLeaks(t)
	srv, _, c, client := serverConn(t, SocketConfig{IdleTimeout: time.Minute})
	reader := newRecorder("reader")
	if err := c.StartReader(reader); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	reader.wait(t, "the packet", func(evs []sink.Event) bool { return count[Packet](evs) == 1 })
	srv.eng.closeIdle(sink.Nanotime())
	if st := c.Stats(); st.Closed || srv.Stats().IdleClosed != 0 {
		t.Fatalf("stats %+v: a connection that just received data was closed as idle", st)
	}
	srv.eng.closeIdle(sink.Nanotime() + int64(2*time.Minute))
	waitCond(t, "the connection, quiet for two idle timeouts, to close", func() bool { return c.Stats().Closed })
}

// A connection whose reading was stopped because the application was
// behind is not idle when reading resumes, however long the stop lasted:
// the application may still be about to answer.
func TestResumedConnectionIsNotIdle(t *testing.T) {
	checkLeaks(t)
	needReadGate(t)
	srv, _, c, client := serverConn(t, SocketConfig{ReadBuffer: 4 << 10, IdleTimeout: time.Minute})
	reader := newRecorder("reader")
	var accept atomic.Bool
	reader.setReject(func(e sink.Event) bool { _, ok := e.(Packet); return ok && !accept.Load() })
	if err := c.StartReader(reader); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	waitCond(t, "reading to stop", func() bool { return c.Stats().ReadStopped })
	// The application stays behind for two idle timeouts.
	c.activity.Store(sink.Nanotime() - int64(2*time.Minute))
	srv.eng.closeIdle(sink.Nanotime())
	if c.Stats().Closed {
		t.Fatal("closed as idle while its reading was stopped")
	}
	accept.Store(true)
	reader.wait(t, "the packet", func(evs []sink.Event) bool { return count[Packet](evs) == 1 })
	waitCond(t, "reading to resume", func() bool { return !c.Stats().ReadStopped })
	srv.eng.closeIdle(sink.Nanotime())
	if st := c.Stats(); st.Closed || srv.Stats().IdleClosed != 0 {
		t.Fatalf("stats %+v: closed as idle right after its reading resumed", st)
	}
}

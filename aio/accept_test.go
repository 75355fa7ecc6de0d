package aio

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandstorm-go/sandstorm/internal/fdtest"
	"github.com/sandstorm-go/sandstorm/internal/logbuf"
)

// echoOnce writes msg on c and reads it back.
func echoOnce(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("echo of %q: got %q, %v", msg, got, err)
	}
}

// highestFD is the largest descriptor number open in this process.
func highestFD(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	hi := 0
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > hi {
			hi = n
		}
	}
	return hi
}

// echoServerForExhaustion starts a one-loop echo server logging to logs
// and a connection a served before the test runs the process out of
// descriptors (Linux only: /proc/self/fd and RLIMIT_NOFILE).
func echoServerForExhaustion(t *testing.T) (srv *Server, a net.Conn, logs *logbuf.Buffer) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc/self/fd and RLIMIT_NOFILE semantics of Linux")
	}
	checkLeaks(t)
	logs = &logbuf.Buffer{}
	m, st := startEchoStage(t)
	srv = listen(t, SocketConfig{EventLoops: 1}, st.Sink(), Env{Manager: m, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	a = dial(t, srv)
	echoOnce(t, a, "before")
	return srv, a, logs
}

// TestAcceptSurvivesDescriptorExhaustion runs the process out of
// descriptors (a lowered RLIMIT_NOFILE filled with /dev/null), so that the
// server's accept fails with EMFILE: the open connection keeps being
// served, the failure is counted and logged once, and the waiting
// connection is accepted and served once descriptors are free again.
func TestAcceptSurvivesDescriptorExhaustion(t *testing.T) {
	srv, a, logs := echoServerForExhaustion(t)

	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	var fillers []*os.File
	closeFillers := func() {
		for _, f := range fillers {
			f.Close()
		}
		fillers = nil
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			closeFillers()
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
				t.Errorf("restore RLIMIT_NOFILE: %v", err)
			}
		}
	}
	t.Cleanup(restore)
	low := orig
	low.Cur = uint64(highestFD(t) + 32)
	if low.Cur >= orig.Cur {
		t.Skipf("descriptor limit %d too low to lower", orig.Cur)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("setrlimit: %v", err)
	}
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		fillers = append(fillers, f)
	}
	if len(fillers) == 0 {
		t.Fatal("no descriptor could be opened below the lowered limit")
	}
	// One descriptor for the client's socket; none is left for accept.
	fillers[len(fillers)-1].Close()
	fillers = fillers[:len(fillers)-1]
	b, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatalf("dial with the last descriptor: %v", err)
	}
	defer b.Close()
	waitCond(t, "accept errors", func() bool { return srv.Stats().AcceptErrors >= 2 })
	echoOnce(t, a, "during") // served while no descriptor is left
	restore()
	echoOnce(t, b, "after") // accepted once descriptors are free again
	s := srv.Stats()
	if s.Accepted != 2 || s.Open != 2 {
		t.Fatalf("stats after recovery: %+v", s)
	}
	// The recovery is logged once the connection is handed over.
	waitCond(t, "recovery log", func() bool { return strings.Contains(logs.String(), "aio: accepting again") })
	out := logs.String()
	if n := strings.Count(out, "aio: accept failed"); n != 1 {
		t.Errorf("%d accept failures logged for %d failed accepts, want 1 per burst:\n%s", n, s.AcceptErrors, out)
	}
	if !strings.Contains(out, "too many open files") || !strings.Contains(out, "aio: accepting again") {
		t.Errorf("log lacks the error or the recovery:\n%s", out)
	}
}

// TestMaxConnectionsRefusedAtAccept: beyond MaxConnections a connection is
// closed as soon as it is accepted; the application never sees it.
func TestMaxConnectionsRefusedAtAccept(t *testing.T) {
	checkLeaks(t)
	m, st := startEchoStage(t)
	srv := listen(t, SocketConfig{MaxConnections: 2}, st.Sink(), Env{Manager: m})
	a, b := dial(t, srv), dial(t, srv)
	echoOnce(t, a, "a")
	echoOnce(t, b, "b")
	// Refused with a reset, so fast that the dial itself may see it.
	if c, err := net.Dial("tcp", srv.Addr().String()); err == nil {
		if n, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatalf("read %d bytes on a connection over the limit", n)
		}
		c.Close()
	}
	waitCond(t, "refusal", func() bool { return srv.Stats().OverLimit == 1 })
	s := srv.Stats()
	if s.OverLimit != 1 || s.RejectedAccepts != 1 || s.Accepted != 2 {
		t.Fatalf("stats %+v", s)
	}
	a.Close()
	waitCond(t, "close", func() bool { return srv.Stats().Open == 1 })
	echoOnce(t, dial(t, srv), "room again")
	if v := m.Metrics().Get(srv.MetricsPrefix() + ".connections.overLimit"); v == nil {
		t.Fatal("no overLimit metric")
	}
}

func TestMaxConnectionsNegativeIsInvalid(t *testing.T) {
	if _, err := Listen(SocketConfig{Addr: "127.0.0.1:0", MaxConnections: -1}, newRecorder("owner"), Env{}); err == nil {
		t.Fatal("Listen accepted maxConnections -1")
	}
}

// TestUnixSocketServer serves a connection over a Unix socket, replacing a
// socket file left behind by an earlier run.
func TestUnixSocketServer(t *testing.T) {
	checkLeaks(t)
	path := filepath.Join(t.TempDir(), "s.sock")
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Skipf("unix sockets: %v", err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	m, st := startEchoStage(t)
	srv := listen(t, SocketConfig{Addr: "unix://" + path}, st.Sink(), Env{Manager: m})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echoOnce(t, c, "over a unix socket")
	if srv.Addr().Network() != "unix" {
		t.Fatalf("Addr %v", srv.Addr())
	}
}

// TestReusePortListeners opens one listener per event loop; connections
// are served whichever one the kernel picks.
func TestReusePortListeners(t *testing.T) {
	checkLeaks(t)
	m, st := startEchoStage(t)
	srv := listen(t, SocketConfig{ReusePort: true, EventLoops: 3}, st.Sink(), Env{Manager: m})
	if len(srv.lns) != 3 {
		t.Fatalf("%d listeners, want 3", len(srv.lns))
	}
	for i := range 12 {
		echoOnce(t, dial(t, srv), "conn "+strconv.Itoa(i))
	}
}

// TestAcceptedConnectionWaitsForADescriptor: accept(2) takes the last
// descriptor, so none is left for the duplicate the hand-over to an event
// loop needs. The connection, whose first bytes already arrived, is held
// (each try counted as a failed accept), not reset, and is served with
// those bytes once descriptors are free again.
func TestAcceptedConnectionWaitsForADescriptor(t *testing.T) {
	srv, a, logs := echoServerForExhaustion(t)

	ex := fdtest.Exhaust(t, 2) // one for the client's socket, one for accept
	b, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatalf("dial with a spare descriptor: %v", err)
	}
	defer b.Close()
	if _, err := b.Write([]byte("sent early")); err != nil {
		t.Fatal(err)
	}
	// The accept loop's own accept(2) fails too while no descriptor is
	// free: wait until the held connection's probe failed and was logged.
	waitCond(t, "the connection held", func() bool {
		return strings.Contains(logs.String(), "no descriptor free to hand an accepted connection")
	})
	echoOnce(t, a, "during") // served while the new connection waits
	ex.Restore()
	got := make([]byte, len("sent early"))
	if _, err := io.ReadFull(b, got); err != nil || string(got) != "sent early" {
		t.Fatalf("the held connection's first bytes: %q, %v", got, err)
	}
	echoOnce(t, b, "after")
	if s := srv.Stats(); s.Accepted != 2 || s.Open != 2 {
		t.Fatalf("stats after recovery: %+v", s)
	}
	waitCond(t, "hand-over log", func() bool { return strings.Contains(logs.String(), "handed over once a descriptor was free") })
	if n := strings.Count(logs.String(), "no descriptor free to hand an accepted connection"); n != 1 {
		t.Errorf("%d warnings for one held connection, want 1:\n%s", n, logs.String())
	}
}

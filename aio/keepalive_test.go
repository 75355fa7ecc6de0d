package aio

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandstorm-go/sandstorm/sink"
)

// TestAcceptedKeepAliveFollowsConfig checks that a server connection's
// TCP keep-alive is what SocketConfig.KeepAlive says: off at 0 (Go's
// listener would otherwise switch on its own 15 s probes), on with the
// configured idle time otherwise.
func TestAcceptedKeepAliveFollowsConfig(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keepAlive time.Duration
		wantOn    int
		wantIdle  int // seconds; checked when on
	}{
		{"off", 0, 0, 0},
		{"30s", 30 * time.Second, 1, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, c, _ := serverConn(t, SocketConfig{KeepAlive: tc.keepAlive})
			c.mu.Lock()
			fd := c.gc.Fd()
			on, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE)
			idle, ierr := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
			c.mu.Unlock()
			if err != nil || ierr != nil {
				t.Fatalf("getsockopt: %v, %v", err, ierr)
			}
			if on != tc.wantOn {
				t.Fatalf("SO_KEEPALIVE = %d, want %d", on, tc.wantOn)
			}
			if on == 1 && idle != tc.wantIdle {
				t.Fatalf("TCP_KEEPIDLE = %d s, want %d s", idle, tc.wantIdle)
			}
		})
	}
}

// TestConnectionsHaveNoDelay: accepted and dialed connections send small
// writes at once (TCP_NODELAY on their socket), as Go's net package sets
// it on every TCP connection it makes; gnet is told not to set it again
// on its duplicate of the descriptor (one system call per connection).
func TestConnectionsHaveNoDelay(t *testing.T) {
	noDelay := func(t *testing.T, c *Connection) {
		t.Helper()
		c.mu.Lock()
		v, err := unix.GetsockoptInt(c.gc.Fd(), unix.IPPROTO_TCP, unix.TCP_NODELAY)
		c.mu.Unlock()
		if err != nil || v == 0 {
			t.Fatalf("TCP_NODELAY = %d (%v), want on", v, err)
		}
	}
	t.Run("accepted", func(t *testing.T) {
		_, _, c, _ := serverConn(t, SocketConfig{})
		noDelay(t, c)
	})
	t.Run("dialed", func(t *testing.T) {
		srv := listen(t, SocketConfig{}, fnSink(func(sink.Event) error { return nil }))
		cl := newClient(t, SocketConfig{})
		owner := newRecorder("owner")
		if err := cl.Connect(srv.Addr().String(), owner, nil); err != nil {
			t.Fatal(err)
		}
		evs := owner.wait(t, "connection", func(evs []sink.Event) bool { return count[*Connection](evs) == 1 })
		c, _ := first[*Connection](evs)
		noDelay(t, c)
	})
}

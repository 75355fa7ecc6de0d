package aio

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

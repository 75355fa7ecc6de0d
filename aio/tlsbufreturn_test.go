package aio

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"
)

// TestTLSBuffersReturnedOnce runs concurrent TLS connections over
// loopback, each echoing messages of one, two and three records and
// closing, and checks the buffers' discipline: every echoed byte is
// intact (a buffer given back while in use would be overwritten by
// another connection, and -race reports the overlap), every read buffer
// drainLocked borrowed comes back, and a closed connection holds no
// sealed buffer gnet has taken (it is recycled at close, not left to the
// garbage collector).
func TestTLSBuffersReturnedOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		conns int
		sizes []int
	}{
		{"one small message", 8, []int{64}},
		{"records of every size", 8, []int{100, maxPlaintext + 1, 3*maxPlaintext - 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTLSFixture(t, TLSConfig{})
			var mu sync.Mutex
			var closed []*Connection
			allClosed := make(chan struct{})
			echo := echoSink(func(c *Connection) {
				mu.Lock()
				closed = append(closed, c)
				if len(closed) == tc.conns {
					close(allClosed)
				}
				mu.Unlock()
			})
			srv, err := Listen(SocketConfig{Addr: "127.0.0.1:0", TLS: &TLSConfig{Config: f.srvCfg}}, echo, Env{Manager: f.m})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			cliCfg := &tls.Config{RootCAs: f.roots, ServerName: "localhost", MinVersion: tls.VersionTLS13}
			lent0 := plainBufStats.lent.Load()

			errs := make(chan error, tc.conns)
			for i := range tc.conns {
				go func() { errs <- echoOver(srv.Addr().String(), cliCfg, i, tc.sizes) }()
			}
			for range tc.conns {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-allClosed:
			case <-time.After(30 * time.Second): // a hang guard
				t.Fatal("the server's connections did not all close")
			}

			for _, c := range closed {
				c.mu.Lock()
				left, applied, queued := c.tls.sent.q.len(), c.applied, c.queued
				c.mu.Unlock()
				if applied == queued && left != 0 {
					t.Errorf("%v: closed with all %d bytes applied and %d sealed buffers not given back", c, applied, left)
				}
			}
			// Every borrowed read buffer comes back (other connections'
			// drains may be under way: wait, with a hang guard).
			deadline := time.Now().Add(30 * time.Second)
			for plainBufStats.returned.Load() != plainBufStats.lent.Load() && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if lent, back := plainBufStats.lent.Load(), plainBufStats.returned.Load(); lent != back || lent == lent0 {
				t.Errorf("read buffers: %d lent (%d in this test), %d given back", lent, lent-lent0, back)
			}
		})
	}
}

// echoOver dials addr, sends one message of each size (seeded by id) and
// checks each comes back whole, then closes.
func echoOver(addr string, cfg *tls.Config, id int, sizes []int) error {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	for k, n := range sizes {
		msg := pattern(id*len(sizes)+k+1, n)
		if _, err := c.Write(msg); err != nil {
			return err
		}
		got := make([]byte, n)
		if _, err := io.ReadFull(c, got); err != nil {
			return fmt.Errorf("conn %d, message %d: %w", id, k, err)
		}
		if !bytes.Equal(got, msg) {
			return fmt.Errorf("conn %d, message %d: %d bytes echoed differ from those sent", id, k, n)
		}
	}
	return nil
}

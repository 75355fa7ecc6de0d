package aio

import (
	"golang.org/x/sys/unix"
)

// A handshake's flight leaves from the goroutine that computed it
// (DESIGN §10): the worker of the handshake stage that ran the step (or
// the event loop, for a last step checked inline) writes the records to
// the socket itself. Handing them to the outbox instead meant gnet's
// AsyncWrite: an eventfd write to wake the connection's event loop, which
// then woke (a thread switched in, often with its P taken by sysmon while
// it slept in epoll_wait), read the eventfd and wrote the flight. A
// flight is a few KB and the socket's send buffer of a connection that
// has sent nothing yet holds it whole, so the write completes at once.
//
// The write is safe beside the event loop: before the session is
// established nothing else writes to the socket, and gnet closes a
// descriptor only after OnClose has returned, which marks the connection
// closed under c.mu; the write happens under c.mu while it is open, so it
// never reaches a descriptor number that was closed and reused. Whatever
// the socket does not take at once (a full send buffer, an error) goes
// through the outbox as before, and so does every later flight of the
// handshake, so that records keep their order.

// writeFlightDirect writes as much of b to the socket as it takes at
// once and returns what is left for the outbox (nil when all of it left).
func (c *Connection) writeFlightDirect(b []byte) []byte {
	s := c.tls
	if s.flightQueued {
		return b // an earlier flight is (partly) in the outbox: keep the order
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stateOpen || c.gc == nil {
		s.flightQueued = true
		return b // the outbox reports the closed connection
	}
	n, err := unix.Write(c.gc.Fd(), b)
	if n > 0 {
		c.eng.stats.bytesOut.Add(uint64(n))
		b = b[n:]
	}
	if len(b) == 0 && err == nil {
		s.flightWritten = true
		if s.hs != nil {
			s.hs.counter.flightsDirect.Add(1)
		}
		return nil
	}
	// EAGAIN or an error: the outbox writes the rest when the socket
	// takes it, or meets the error and closes the connection.
	s.flightQueued = true
	return b
}

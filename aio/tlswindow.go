package aio

import "github.com/panjf2000/gnet/v2"

// This file keeps in-memory output moving past the write window on the
// event loop. Over TLS every body is in memory (sealed records: no
// sendfile), so a cached page larger than WriteWindow (256 KiB) is handed
// to gnet one window at a time. progress used to hand over one window per
// visit and leave the rest to the drain poll (PollInterval, 1 ms, backing
// off while the output does not move) even when the kernel had taken every
// byte at once: a 500 KB page over TLS to one client took 2.0 ms against
// nginx's 0.7 ms (docs/tls.md, "2026-11-27 22:55").

// pumpAgainLocked reports whether progress may hand the next window of
// in-memory bytes over at once (event loop, c.mu held, released around a
// flush), after a pass that handed pumped bytes: yes when the kernel has
// taken everything handed so far and this visit has not sent
// fileSendCap bytes yet (the cap is shared with file segments, so that
// one large response does not hold the loop from its other
// connections: the loop comes back by a Wake). When the socket is full
// it asks the engine's write poller to wake the connection once it is
// writable, instead of waiting for the next drain poll; when the
// OutputBudget, not the socket, stopped the pass, the drain poll comes
// back as before.
func (c *Connection) pumpAgainLocked(gc gnet.Conn, pumped int64, sent *int64) bool {
	if gc.OutboundBuffered() > 0 {
		if !c.flushOutboundLocked(gc) {
			return false
		}
	} else {
		c.fileWait = false
		c.updateFlushedLocked(gc)
		if pumped == 0 {
			return false
		}
	}
	if *sent += pumped; *sent >= fileSendCap {
		_ = gc.Wake(nil) // let the loop's other tasks run; go on afterwards
		return false
	}
	// c.mu was released around the pump and the flush: a write handed
	// off meanwhile (AsyncWritev) goes before anything taken from later
	// now, and an Abort drops what is left.
	return c.handoffs.len() == 0 && (c.state == stateOpen || c.state == stateClosing)
}

// flushOutboundLocked writes what gnet still buffers for c, which must
// leave before anything more is handed over (event loop, c.mu held,
// released around the write), and reports whether gnet's buffer is empty
// now. If the socket is full it has the engine's write poller wake c
// once it is writable; if the write failed, gnet closed c.
func (c *Connection) flushOutboundLocked(gc gnet.Conn) bool {
	c.fileWait = false
	if gc.OutboundBuffered() == 0 {
		return true
	}
	c.mu.Unlock()
	err := gc.Flush() // on failure gnet closes the connection (OnClose takes c.mu)
	c.mu.Lock()
	if err != nil || c.state == stateClosed {
		return false
	}
	c.updateFlushedLocked(gc)
	if gc.OutboundBuffered() > 0 {
		c.waitWritableLocked(gc)
		return false
	}
	return true
}

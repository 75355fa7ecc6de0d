package aio

import (
	"fmt"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// This file is what the socket's maintenance goroutine runs for a
// Connection: its visits (delivery retries, timers, deadlines) and the
// connection's last rites.

// tick is the maintenance goroutine's visit: retry deliveries, resume a
// paused reader, poll the output drain, enforce the close deadline.
func (c *Connection) tick(now time.Time) {
	empty := c.box.drain()
	if empty {
		c.retryDelay.Store(int64(c.eng.cfg.PollInterval))
	}
	nowN := sink.Nanotime()
	if at := c.timerAt.Load(); at != 0 {
		switch {
		case at > nowN:
			c.eng.armAt(c, at)
		case c.timerAt.CompareAndSwap(at, 0):
			c.box.send(delivery{to: c.events(), ev: TimerExpired{Conn: c}})
		}
	}
	if c.tls != nil && c.tlsHandshakeExpired(nowN) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case stateClosed, stateAborting:
		return
	case stateLingering:
		if nowN >= c.lingerBy {
			c.abortLocked(ClosedLocal, nil)
		} else {
			c.eng.armAt(c, c.lingerBy)
		}
		return
	case stateClosing:
		if !c.closeBy.IsZero() && now.After(c.closeBy) {
			c.abortLocked(ClosedLocal, ErrCloseTimeout)
			return
		}
	}
	if wt := int64(c.cfg.WriteTimeout); wt > 0 && c.queued > c.flushed.Load() && nowN-c.lastOut > wt {
		c.eng.stats.writeTimeouts.Add(1)
		c.abortLocked(ClosedWriteTimeout, ErrWriteTimeout)
		return
	} else if wt > 0 && c.fileWait {
		// A file segment waits for the write poller: nothing else brings
		// the connection back here before its write timeout.
		c.eng.armAt(c, c.lastOut+wt+1)
	}
	wake := c.wantPoll.Load()
	if c.paused.Load() {
		switch at := c.resumeAt.Load(); {
		case !empty:
			// Still waiting for the sink (or for another goroutine
			// delivering right now): look again later.
			c.armRetry()
		case at <= sink.Nanotime():
			wake = true
		default:
			c.eng.armAt(c, at)
		}
	}
	if wake {
		_ = c.gc.Wake(nil)
	}
}

// finish is the last visit when the socket closes: deliver what the sinks
// take now, report the rest.
func (c *Connection) finish() {
	c.box.drain()
	for _, d := range c.box.discard() {
		c.eng.lostEvent(d, fmt.Errorf("%w: sink still rejecting when the socket closed", sink.ErrRejected))
	}
}

// releaseHeld delivers a held SinkClosed to the owner when the socket
// closes and StartReader never came; the held bytes are reported as Unread.
func (c *Connection) releaseHeld() {
	c.mu.Lock()
	held, tail := c.held, c.tail
	c.held, c.tail = nil, nil
	c.mu.Unlock()
	if held == nil {
		return
	}
	for _, p := range tail {
		held.Unread += int64(len(p.Data))
	}
	c.box.send(delivery{to: c.owner, ev: *held})
	c.finish()
}

package remote

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// A node's link to NATS across outages (a restarted server, a lost
// connection): the client reconnects on its own, and while it does,
// nothing is buffered (nats.ReconnectBufSize(-1)): a publish fails at
// once. What depends on the link:
//
//   - a request only one instance can take (a reply: an event with a
//     home, Codecs.SetHome, or one sent on a SinkRef; a transaction's
//     Commit or Abort) waits for the link to come back, and for that
//     instance (its node may be cut off too: no responders, or out of
//     rotation), until its stage's remote timeout (see
//     stageSender.boundTrip), going to it whatever the sender thinks of
//     its heartbeat (stageSender.homeReplica), never to another replica
//     or the stage's queue group; any other event is rejected at once;
//   - a sender takes no replica out of rotation while its own link is
//     down: the silence is its own (see stageSender.sweep).

// linkPoll is how often a wait for the link looks at the connection.
const linkPoll = 10 * time.Millisecond

// rejoinPause is how long a bound request (a reply, a transaction's
// outcome) waits before it is sent again to an instance not subscribed
// (its node cut off, or reconnecting after an outage).
const rejoinPause = 20 * time.Millisecond

// linkState follows the node's connection; the connection's handlers set it.
type linkState struct {
	cut      atomic.Bool  // disconnected, not reconnected yet
	rejoined atomic.Int64 // the last reconnection, UnixNano (0: none yet)
}

func (l *linkState) disconnected() { l.cut.Store(true) }

func (l *linkState) reconnected(now time.Time) {
	l.rejoined.Store(now.UnixNano())
	l.cut.Store(false)
}

// cutOff reports whether the node's connection to NATS is down.
func (n *Node) cutOff() bool { return n.link.cut.Load() || n.nc != nil && !n.nc.IsConnected() }

// rejoining reports whether the node is cut off from NATS, or came back
// within the last d: the other nodes may still be reconnecting, their
// subscriptions not yet back on the server.
func (n *Node) rejoining(d time.Duration) bool {
	return n.cutOff() || time.Since(time.Unix(0, n.link.rejoined.Load())) < d
}

// awaitLink waits until the node's connection is up, and reports whether
// it is: false once deadline passes, the connection is closed for good or
// the node closes.
func (n *Node) awaitLink(deadline time.Time) bool {
	for n.cutOff() {
		if n.nc == nil || n.nc.IsClosed() || n.ctx.Err() != nil {
			return false
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		if !n.pause(min(linkPoll, left)) {
			return false
		}
	}
	return true
}

// pause sleeps for d, or less if the node closes: it reports whether the
// node is still open.
func (n *Node) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-n.ctx.Done():
		return false
	}
}

// linkDown reports whether err is a publish refused because the
// connection is down (reconnecting), or the node is cut off now.
func (n *Node) linkDown(err error) bool {
	return errors.Is(err, nats.ErrReconnectBufExceeded) || errors.Is(err, nats.ErrConnectionReconnecting) || n.cutOff()
}

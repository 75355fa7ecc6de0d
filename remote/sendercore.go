package remote

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// senderCore is what the two remote sinks (stageSender in request mode,
// durableSender) keep and do alike: the sender-side predicate, the
// counters Stats reports, the round-trip latencies and the idempotency
// keys. Each sink embeds it and adds its own transport.
type senderCore struct {
	n       *Node
	stage   string
	cfg     StageConfig
	pred    atomic.Pointer[predBox]
	seq     atomic.Uint64
	latency *latencies

	sent, events, rejected, retrans, dropped atomic.Uint64
}

type predBox struct{ p sink.Predicate }

// reject counts a rejection and returns it.
func (c *senderCore) reject(reason string) error {
	c.rejected.Add(1)
	return &RejectError{Stage: c.stage, Reason: reason}
}

// admitLocally runs the sender-side predicate, if any, on es: nil if it
// accepts every rejectable event, else a counted rejection.
func (c *senderCore) admitLocally(es []sink.Event) error {
	b := c.pred.Load()
	if b == nil || b.p == nil {
		return nil
	}
	for _, e := range es {
		if !sink.IsNonRejectable(e) && !b.p.Accept(e) {
			c.rejected.Add(1)
			return &RejectError{Stage: c.stage, Predicate: sink.PredicateName(b.p), Reason: "refused by the sender's own predicate"}
		}
	}
	return nil
}

// newID returns a new idempotency key, unique to this node's instance.
func (c *senderCore) newID() string {
	return c.n.inst + "." + strconv.FormatUint(c.seq.Add(1), 36)
}

// lossy is EnqueueLossy's verdict on Enqueue's error: a refused event is
// counted as dropped.
func (c *senderCore) lossy(err error) bool {
	if err != nil {
		c.dropped.Add(1)
		return false
	}
	return true
}

// setPredicate binds p to self, the sink that embeds c, and sets it.
func (c *senderCore) setPredicate(self sink.Sink, p sink.Predicate) {
	if b, ok := p.(sink.Binder); ok {
		b.Bind(self)
	}
	c.pred.Store(&predBox{p: p})
}

// Predicate returns the sender-side predicate, or nil.
func (c *senderCore) Predicate() sink.Predicate {
	if b := c.pred.Load(); b != nil {
		return b.p
	}
	return nil
}

// Stats returns the sink's counters.
func (c *senderCore) Stats() SinkStats {
	return SinkStats{Sent: c.sent.Load(), Events: c.events.Load(), Rejected: c.rejected.Load(),
		Retransmits: c.retrans.Load(), Dropped: c.dropped.Load()}
}

// RoundTrip returns the 50th and 99th percentiles of the recent round
// trips: verdicts in request mode, publish acknowledgements if durable.
func (c *senderCore) RoundTrip() (p50, p99 time.Duration) { return c.latency.percentiles() }

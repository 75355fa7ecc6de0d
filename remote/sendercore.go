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
//
// The sender-side predicate lives in adm (sink.Admission): every event
// it admits gets exactly one Done or Cancel, through complete, once the
// sink knows its fate: Done when a replica took it (its verdict, or the
// stream's acknowledgement), with the round trip as its service time;
// Cancel when it was not taken (refused by the replica, no replica, no
// verdict in time, a transport or encoding error, a transaction aborted
// or refused at commit).
type senderCore struct {
	n       *Node
	stage   string
	cfg     StageConfig
	adm     sink.Admission
	seq     atomic.Uint64
	keys    string // what its idempotency keys start with ("": this instance's name and a dot)
	latency *latencies

	sent, events, rejected, retrans, dropped atomic.Uint64
}

// reject counts a rejection and returns it.
func (c *senderCore) reject(reason string) error {
	c.rejected.Add(1)
	return &RejectError{Stage: c.stage, Reason: reason}
}

// admit runs the sender-side predicate on es, all or nothing: the Ticket
// to complete them with, or a counted rejection.
func (c *senderCore) admit(es []sink.Event) (sink.Ticket, error) {
	var t sink.Ticket
	var err error
	if len(es) == 1 {
		t, err = c.adm.Admit(es[0])
	} else {
		t, err = c.adm.AdmitMany(es)
	}
	if err != nil {
		c.rejected.Add(1)
	}
	return t, err
}

// complete settles es, admitted with t, once their fate is known: Done
// (service: the time since start) if err is nil, else Cancel.
func complete(t sink.Ticket, es []sink.Event, err error, start time.Time) {
	if t.Predicate() == nil {
		return
	}
	if err != nil {
		for _, e := range es {
			t.Cancel(e)
		}
		return
	}
	d := time.Since(start)
	for _, e := range es {
		t.Done(e, 0, d)
	}
}

// newID returns a new idempotency key, unique to this node's instance
// (the one sender of each stage numbers its keys; each reference sink,
// many to one exported sink, also puts its own number in them).
func (c *senderCore) newID() string {
	if c.keys != "" {
		return c.keys + strconv.FormatUint(c.seq.Add(1), 36)
	}
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

// Predicate returns the sender-side predicate, or nil.
func (c *senderCore) Predicate() sink.Predicate { return c.adm.Predicate() }

// Stats returns the sink's counters.
func (c *senderCore) Stats() SinkStats {
	return SinkStats{Sent: c.sent.Load(), Events: c.events.Load(), Rejected: c.rejected.Load(),
		Retransmits: c.retrans.Load(), Dropped: c.dropped.Load()}
}

// RoundTrip returns the 50th and 99th percentiles of the recent round
// trips: verdicts in request mode, publish acknowledgements if durable.
func (c *senderCore) RoundTrip() (p50, p99 time.Duration) { return c.latency.percentiles() }

package remote

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandstorm-go/sandstorm/sink"
)

// SinkStats counts a remote sink's traffic.
type SinkStats struct {
	Sent        uint64 // requests sent (one per Enqueue, EnqueueMany or Prepare)
	Events      uint64 // events admitted by a replica
	Rejected    uint64 // requests rejected (by a replica, or for want of one)
	Retransmits uint64 // requests sent again after a timeout
	Dropped     uint64 // EnqueueLossy events refused
	// Redelivered is, for a durable stage, how many times its stream
	// delivered a message again (a replica died or its handler or
	// predicate refused it): JetStream's count for the stage's consumer,
	// so for every sender of the stage, not this one alone, refreshed at
	// most once per heartbeat. It is exact while the consumer has seen the
	// stream from its first message. Always 0 in request mode, which
	// retransmits (Retransmits) instead.
	Redelivered uint64
	// DeadLettered is, for a durable stage, how many events its replicas
	// gave up on after remote.maxDeliver deliveries and moved to the
	// stage's dead-letter stream: the stream's count (its last sequence,
	// so purging it does not lower it), for every sender of the stage,
	// refreshed at most once per heartbeat.
	DeadLettered uint64
	// Unanswered counts requests rejected before the timeout because
	// their replica was taken out of rotation while they waited (request
	// mode: it stopped sending heartbeats); the event may have been
	// admitted there.
	Unanswered uint64
	// Failovers counts requests of an idempotent stage sent again to
	// another replica when theirs was taken out of rotation.
	Failovers uint64
}

// stageSender is the sink of a stage hosted on other nodes, in request
// mode: every enqueue is a NATS request whose reply is the verdict of the
// replica's own admission control.
type stageSender struct {
	senderCore
	group string // the queue-group subject every replica serves
	fixed string // for a reference: the one subject, else ""
	ref   uint64 // for a reference: the sink's number there
	sub   *nats.Subscription

	mu       sync.Mutex
	replicas map[string]*replicaState // by instance

	comb      combiner                   // concurrent Enqueues, sent together
	lastCodec atomic.Pointer[tableCodec] // the codec of the last event Enqueued (usually the next one's)
	homes     sync.Map                   // home instance → *combiner, for events with a home (Codecs.SetHome)

	now       func() time.Time // the clock of the replicas' health (tests set a fake one)
	warns     frontWarnings
	lastSweep time.Time              // the watch's
	wasCut    bool                   // the watch's: its last sweep found the node cut off from NATS
	source    atomic.Pointer[string] // the one local stage sending here, if one (sourceStage)

	unanswered, failovers atomic.Uint64
}

var (
	_ sink.Sink = (*stageSender)(nil)
	_ sink.Sink = (*refSink)(nil)
)

// StageSink returns the request-mode remote sink of a stage other nodes
// host. NewManager makes one for every such stage; call StageSink for
// producers outside any manager.
func (n *Node) StageSink(name string, rc StageConfig) (sink.Sink, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.senders[name]; ok {
		return s, nil
	}
	s := newStageSender(n, name, rc)
	sub, err := n.nc.Subscribe(n.loadSubject(name), s.heartbeat)
	if err != nil {
		return nil, fmt.Errorf("remote: subscribe to %s's load: %w", name, err)
	}
	s.sub = sub
	n.senders[name] = s
	n.wg.Add(1)
	go s.watch()
	return s, nil
}

func newStageSender(n *Node, name string, rc StageConfig) *stageSender {
	return &stageSender{senderCore: senderCore{n: n, stage: name, cfg: rc.withDefaults(), latency: newLatencies()},
		group: n.stageSubject(name), replicas: map[string]*replicaState{}, now: time.Now}
}

// refSink is a sink another node exported (SinkRef) and this node imported.
type refSink struct {
	*stageSender
	ref SinkRef
}

func (n *Node) refSink(r SinkRef) sink.Sink {
	keys := n.inst + ".r" + strconv.FormatUint(n.refSinks.Add(1), 36) + "."
	s := &stageSender{senderCore: senderCore{n: n, stage: r.Name, cfg: StageConfig{}.withDefaults(), keys: keys},
		fixed: n.refSubject(r.Inst), ref: r.ID, now: time.Now}
	return &refSink{stageSender: s, ref: r}
}

// SetPredicate sets a predicate run on this node before an event is sent
// (nil: none), bound to the reference sink itself.
func (s *refSink) SetPredicate(p sink.Predicate) { s.adm.SetPredicate(s, p) }

func (s *refSink) String() string {
	return fmt.Sprintf("remote ref %s@%s#%d", s.ref.Name, s.ref.Node, s.ref.ID)
}

func (s *stageSender) String() string { return "remote stage " + s.stage }

// Stats returns the sink's counters.
func (s *stageSender) Stats() SinkStats {
	st := s.senderCore.Stats()
	st.Unanswered, st.Failovers = s.unanswered.Load(), s.failovers.Load()
	return st
}

// heartbeat records a replica's load report.
func (s *stageSender) heartbeat(m *nats.Msg) {
	r := &reader{b: m.Data}
	inst, node, l := string(r.bytes()), string(r.bytes()), r.uvarint()
	if r.err != nil {
		return
	}
	version := uint64(legacyWire) // a heartbeat of version 1 ends with the length
	if len(r.b) > 0 {
		version = r.uvarint()
	}
	if r.err != nil || version < legacyWire {
		return // malformed (a cut or bad version): not a sign of life
	}
	rs := s.heard(inst, node)
	rs.len.Store(int64(l))
	if rs.wire.Swap(int64(version)) != int64(version) && version != WireVersion {
		s.warn(&s.warns.version, "remote: replica speaks another wire version", "replica", node, "instance", inst,
			"wire", version, "speaks", WireVersion)
	}
}

// pick returns the least loaded replica in rotation (queue length as last
// reported plus this sender's requests in flight to it; a replica whose
// request timed out lately only if no other is left), or nil if none is
// known: then the request goes to the queue group. allOut reports that
// replicas are known but the watch took every one out of rotation.
func (s *stageSender) pick() (rs *replicaState, allOut bool) {
	if s.fixed != "" {
		return nil, false
	}
	stale := s.staleBefore()
	var fresh, slow []*replicaState
	out := 0
	s.mu.Lock()
	for _, rs := range s.replicas {
		switch {
		case rs.out.Load():
			out++
		case !rs.inRotation(stale):
		case rs.timedOut.Load() >= stale:
			slow = append(slow, rs)
		default:
			fresh = append(fresh, rs)
		}
	}
	known := len(s.replicas)
	s.mu.Unlock()
	live := fresh
	if len(live) == 0 {
		live = slow
	}
	if len(live) == 0 {
		return nil, known > 0 && out == known
	}
	// the least loaded, ties broken from a random start
	off := rand.IntN(len(live))
	var best *replicaState
	var bestLoad int64
	for i := range live {
		rs := live[(off+i)%len(live)]
		if l := rs.len.Load() + rs.inflight.Load(); best == nil || l < bestLoad {
			best, bestLoad = rs, l
		}
	}
	return best, false
}

func (s *stageSender) subject(rs *replicaState) string {
	switch {
	case s.fixed != "":
		return s.fixed
	case rs != nil:
		return rs.subject
	}
	return s.group
}

// call sends one request and returns the replica's verdict (with the
// replica that gave it), retransmitting on timeout.
func (s *stageSender) call(op byte, id string, es []sink.Event, to *replicaState) (*verdict, *replicaState, error) {
	if id == "" {
		id = s.newID()
	}
	buf := requestBuffers.Get().(*[]byte)
	defer putRequestBuffer(buf)
	data, err := s.n.wire.encodeRequest(*buf, &request{op: op, id: id, from: s.from(), ref: s.ref, events: es}, s.stage)
	if err != nil {
		s.rejected.Add(1)
		return nil, nil, err
	}
	*buf = data
	return s.roundTrip(data, injectTraces(es), to, "")
}

// requestBuffers holds the buffers requests are encoded in: a request's
// bytes are copied into the connection's buffer when it is sent, so its
// buffer is free again once its verdict is in.
var requestBuffers = sync.Pool{New: func() any { return new([]byte) }}

// putRequestBuffer returns a request's buffer to requestBuffers, unless it
// grew too large to keep.
func putRequestBuffer(buf *[]byte) {
	if cap(*buf) > 1<<20 {
		return
	}
	*buf = (*buf)[:0]
	requestBuffers.Put(buf)
}

// roundTrip sends an encoded request (which holds its idempotency key)
// to to, or else to home's replica (home: the instance its events go
// back to, Codecs.SetHome; "" for none), or else to the least loaded
// replica in rotation, and returns the verdict. hdr, if not nil, holds
// the events' trace contexts. A bound request is one only one instance
// can take (a reply: its events' home, or a SinkRef's node): it never
// goes to the stage's queue group; while this node is cut off from NATS,
// and while the other nodes may still be reconnecting after it came
// back, it waits and is sent again (same idempotency key, its home
// resolved again) until the stage's timeout, where any other request is
// rejected at once (see link.go).
func (s *stageSender) roundTrip(data []byte, hdr nats.Header, to *replicaState, home string) (*verdict, *replicaState, error) {
	bound := s.fixed != "" || home != ""
	attempts := s.cfg.Retries + 1
	per := s.cfg.Timeout / time.Duration(attempts)
	rs, err := s.destination(to, home)
	if err != nil {
		return nil, nil, err
	}
	s.sent.Add(1)
	start := time.Now()
	deadline := start.Add(s.cfg.Timeout)
	msg := &nats.Msg{Data: data, Header: hdr}
	for attempt, failovers, movedOn := 0, 0, false; attempt < attempts; {
		if bound && attempt > 0 && !time.Now().Before(deadline) {
			break // waiting for the link took the time of the attempts left
		}
		msg.Subject = s.subject(rs)
		reply, err := s.request(msg, rs, per)
		switch {
		case err == nil:
			v, derr := decodeVerdict(reply.Data)
			if derr != nil {
				return nil, rs, s.reject(derr.Error())
			}
			s.latency.add(time.Since(start))
			if v.inst != "" && s.fixed == "" {
				rs = s.answered(rs, v)
			}
			return v, rs, nil
		case s.n.linkDown(err), errors.Is(err, nats.ErrNoResponders) && bound && s.n.rejoining(s.staleAfter()):
			// The link is down, or the destination's node may not have
			// resubscribed yet after the outage: the same attempt again,
			// once the link is back.
			if rs, err = s.afterLinkDown(rs, to, home, attempt, bound, start, deadline); err != nil {
				return nil, rs, err
			}
			continue
		case errors.Is(err, nats.ErrNoResponders):
			if attempt > 0 {
				// It heard us before (or we cannot tell): the event may
				// have been admitted there; do not hand it to another.
				return nil, rs, s.reject("replica went away before its verdict came back (the event may have been admitted)")
			}
			if rs != nil && failovers < 8 {
				rs.dead.Store(true) // nobody there: it is gone, try another
				failovers++
				next, allOut := s.pick()
				if allOut {
					return nil, nil, s.noneInRotation()
				}
				if next != nil || !bound { // a bound request has no queue group to go to
					rs = next
					continue
				}
			}
			if s.fixed != "" {
				return nil, nil, s.reject("the node holding the sink is gone")
			}
			s.warn(&s.warns.none, "remote: no replica of the stage is up: enqueue rejected")
			return nil, nil, s.reject("no replica of the stage is up")
		case errors.Is(err, errOutOfRotation):
			// Its replica stopped answering while we waited. An
			// idempotent stage takes the event from another replica, once;
			// otherwise it may have been admitted there: answer now
			// rather than at the timeout.
			if s.cfg.Idempotent && !movedOn {
				if next, _ := s.pick(); next != nil {
					movedOn, rs = true, next
					s.failovers.Add(1)
					continue
				}
			}
			s.unanswered.Add(1)
			return nil, rs, s.reject(fmt.Sprintf("replica on node %s stopped answering (silent for %v) before its verdict came back (the event may have been admitted)",
				rs.node, s.staleAfter()))
		case errors.Is(err, nats.ErrTimeout):
			attempt++
			if attempt < attempts {
				s.retrans.Add(1)
				if rs, err = s.resend(rs, to, home, attempt); err != nil {
					return nil, rs, err
				}
			}
		default:
			return nil, rs, s.reject(err.Error())
		}
	}
	node := "(queue group)"
	if rs != nil {
		node = rs.node
	}
	s.warn(&s.warns.timeout, "remote: no verdict in time: enqueue rejected", "replica", node, "timeout", s.cfg.Timeout, "attempts", attempts)
	return nil, rs, s.reject(fmt.Sprintf("no verdict within %v (%d attempts)", s.cfg.Timeout, attempts))
}

// destination returns the replica a request goes to: to if set; else,
// for events with a home, the home's replica or, if it is out of
// rotation, the least loaded other; else the least loaded replica. It
// returns nil for a reference (its one subject) and, for a request not
// bound to an instance, when no replica is known in rotation: the stage's
// queue group then takes it. A bound request never goes to the queue
// group (the replica of another instance, another front, could take it):
// with no replica to go to it is rejected.
func (s *stageSender) destination(to *replicaState, home string) (*replicaState, error) {
	if to != nil || s.fixed != "" {
		return to, nil
	}
	if rs := s.homeReplica(home); rs != nil {
		return rs, nil
	}
	rs, allOut := s.pick()
	if allOut || rs == nil && home != "" {
		return nil, s.noneInRotation()
	}
	return rs, nil
}

// resend returns the replica a request is sent to again, after attempt
// attempts that got no verdict (rs: where the last went): a request with
// a home resolves it again (its state may have changed while it waited
// for the link: heard again, or gone). One that may have reached rs
// (attempt > 0) is not handed to another replica: the event may have
// been admitted there.
func (s *stageSender) resend(rs, to *replicaState, home string, attempt int) (*replicaState, error) {
	if home == "" || to != nil || s.fixed != "" {
		return rs, nil
	}
	next, err := s.destination(nil, home)
	switch {
	case err != nil:
		return rs, err
	case attempt > 0 && rs != nil && next.inst != rs.inst:
		return rs, s.reject(fmt.Sprintf("replica on node %s left before its verdict came back (the event may have been admitted)", rs.node))
	}
	return next, nil
}

// afterLinkDown decides on a request that could not be sent because the
// link is down, or, for a bound request, because its destination may not
// have resubscribed yet after an outage (rs: where it went; start: when
// it was first sent; deadline: the stage's timeout from then). A request
// that is not bound is rejected at once; a bound one waits for the link
// (awaitRejoin) and returns the replica to send it to again (resend), or
// is rejected once deadline has passed.
func (s *stageSender) afterLinkDown(rs, to *replicaState, home string, attempt int, bound bool, start, deadline time.Time) (*replicaState, error) {
	if !bound || !s.awaitRejoin(deadline) {
		return rs, s.cutOff(bound, time.Since(start))
	}
	return s.resend(rs, to, home, attempt)
}

// awaitRejoin pauses a bound request that could not be sent (the link
// down, or its destination not subscribed yet after an outage) and waits
// for the link: it reports whether to send it again, false once deadline
// has passed.
func (s *stageSender) awaitRejoin(deadline time.Time) bool {
	left := time.Until(deadline)
	return left > 0 && s.n.pause(min(rejoinPause, left)) && s.n.awaitLink(deadline) && time.Now().Before(deadline)
}

// cutOff is the rejection of a request this node could not send because
// it is cut off from NATS (or, for a bound one, because its destination
// did not come back within the timeout), logged at WARN, rate-limited.
func (s *stageSender) cutOff(bound bool, waited time.Duration) error {
	if !bound {
		s.warn(&s.warns.cut, "remote: cut off from NATS: enqueue rejected")
		return s.reject("this node is cut off from NATS (reconnecting)")
	}
	s.warn(&s.warns.cut, "remote: cut off from NATS: reply not delivered in time", "waited", waited.Round(time.Millisecond))
	return s.reject(fmt.Sprintf("cut off from NATS: not delivered within %v (this node or the one it goes to reconnecting)", s.cfg.Timeout))
}

// Enqueue sends e to the least loaded replica and returns its verdict:
// nil, or an error wrapping sink.ErrRejected (naming node, stage and
// predicate) or sink.ErrClosed. No replica up is a rejection at once; a
// replica that does not answer is asked again with the same idempotency
// key (it admits the event once) until the stage's remote timeout.
func (s *stageSender) Enqueue(e sink.Event) error {
	t, err := s.adm.Admit(e)
	if err != nil {
		s.rejected.Add(1)
		return err
	}
	if t.Predicate() == nil {
		return s.enqueueCombined(e)
	}
	start := time.Now()
	err = s.enqueueCombined(e)
	complete(t, []sink.Event{e}, err, start)
	return err
}

// EnqueueMany sends es to one replica, which admits all of them or none.
// Concurrent EnqueueManys (and Enqueues) share a message, each decided
// on its own (see combiner).
func (s *stageSender) EnqueueMany(es []sink.Event) error {
	if len(es) == 0 {
		return nil
	}
	t, err := s.admit(es)
	if err != nil {
		return err
	}
	start := time.Now()
	err = s.enqueueMany(es)
	complete(t, es, err, start)
	return err
}

// enqueueMany encodes es and sends them, as one group, with the other
// Enqueues and EnqueueManys waiting for the same destination: the home
// of es[0] (Codecs.SetHome), or any replica.
func (s *stageSender) enqueueMany(es []sink.Event) error {
	p := pendingPool.Get().(*pending)
	enc, last, err := s.n.wire.appendEvents(p.enc[:0], s.stage, es)
	if err != nil {
		pendingPool.Put(p)
		s.rejected.Add(1)
		return err
	}
	p.event, p.events, p.codec, p.enc, p.err, p.asked, p.trace = nil, es, last, enc, nil, false, pendingTrace{}
	return s.combinerFor(s.n.wire.home(es[0])).enqueue(s, p)
}

// combinerFor returns the combiner of the requests to home ("": any
// replica).
func (s *stageSender) combinerFor(home string) *combiner {
	if home == "" || s.fixed != "" {
		return &s.comb
	}
	v, _ := s.homes.LoadOrStore(home, &combiner{home: home})
	return v.(*combiner)
}

// EnqueueLossy is Enqueue reporting only whether e was admitted.
func (s *stageSender) EnqueueLossy(e sink.Event) bool { return s.lossy(s.Enqueue(e)) }

// Prepare asks one replica to admit es and hold room for them; the Txn's
// Commit makes them visible there, Abort gives the room back. A replica
// aborts a transaction nobody committed within the duplicates window.
func (s *stageSender) Prepare(es []sink.Event) (sink.Txn, error) {
	tk, err := s.admit(es)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	id := s.newID()
	v, rs, err := s.call(opPrepare, id, es, nil)
	if err == nil {
		if err = v.err(); err != nil {
			s.rejected.Add(1)
		}
	}
	if err != nil {
		complete(tk, es, err, start)
		return nil, err
	}
	txn := &remoteTxn{s: s, id: id, rs: rs, n: len(es), ticket: tk, start: start}
	if tk.Predicate() != nil {
		txn.es = slices.Clone(es) // the caller may reuse es
	}
	return txn, nil
}

// remoteTxn is a transaction a replica prepared. Its events hold the
// sender-side predicate's credit (ticket) until Commit (Done once the
// replica confirms, else Cancel) or Abort (Cancel).
type remoteTxn struct {
	s      *stageSender
	id     string
	rs     *replicaState
	n      int
	es     []sink.Event // for the predicate, if any
	ticket sink.Ticket
	start  time.Time
	once   sync.Once
}

func (t *remoteTxn) finish(op byte) {
	t.once.Do(func() {
		v, _, err := t.s.call(op, t.id, nil, t.rs)
		if err == nil {
			err = v.err()
		}
		if err != nil {
			t.s.n.log.Error("remote: transaction outcome not delivered", "stage", t.s.stage, "op", op, "err", err)
		} else if op == opCommit {
			t.s.events.Add(uint64(t.n))
		}
		if op == opAbort {
			err = sink.ErrRejected // not kept, whatever the replica answered
		}
		complete(t.ticket, t.es, err, t.start)
	})
}

func (t *remoteTxn) Commit() { t.finish(opCommit) }
func (t *remoteTxn) Abort()  { t.finish(opAbort) }

// Len returns the sum of the queue lengths of the replicas in rotation,
// as last reported.
func (s *stageSender) Len() int {
	_, queued := s.inRotation()
	return queued
}

// SetPredicate sets a predicate run on this node before an event is sent
// (nil: none); the replicas' own predicates still decide.
func (s *stageSender) SetPredicate(p sink.Predicate) { s.adm.SetPredicate(s, p) }

// Stats returns the counters of a remote sink (one of this package's), and
// false for any other sink.
func Stats(s sink.Sink) (SinkStats, bool) {
	if u, ok := s.(interface{ Unwrap() sink.Sink }); ok {
		s = u.Unwrap()
	}
	switch v := s.(type) {
	case *stageSender:
		return v.Stats(), true
	case *refSink:
		return v.Stats(), true
	case *durableSender:
		return v.Stats(), true
	}
	return SinkStats{}, false
}

// RoundTrip returns the p50 and p99 of a remote sink's recent verdict
// round trips (request mode) or publish acknowledgements (durable), and
// false for any other sink.
func RoundTrip(s sink.Sink) (p50, p99 time.Duration, ok bool) {
	if u, ok := s.(interface{ Unwrap() sink.Sink }); ok {
		s = u.Unwrap()
	}
	if r, ok := s.(interface {
		RoundTrip() (time.Duration, time.Duration)
	}); ok {
		p50, p99 = r.RoundTrip()
		return p50, p99, true
	}
	return 0, 0, false
}

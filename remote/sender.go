package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
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
			if !bound || !s.awaitRejoin(deadline) {
				return nil, rs, s.cutOff(bound, time.Since(start))
			}
			if rs, err = s.resend(rs, to, home, attempt); err != nil {
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

// ---- combining concurrent Enqueues ----

// maxCombined bounds the Enqueues and EnqueueManys one combined request
// carries (and maxCombinedBytes, or half the server's maximum payload,
// their encoded events, unless the first caller's alone is larger),
// and maxLeaders the combined requests in flight at once. One request in
// flight per sink measured best (2026-11-24, shared 2-core machine: 1.1-1.5x
// a plain publisher with one, 0.4-0.8x with two: smaller batches; again
// 2026-11-27 with two or four in flight once 8-32 events wait: see
// docs/cluster.md, Throughput).
const (
	maxCombined      = 256
	maxCombinedBytes = 256 << 10
	maxLeaders       = 1
)

// combiner sends the Enqueues and EnqueueManys of concurrent goroutines
// together: a goroutine that finds fewer than maxLeaders requests in
// flight sends every waiting event or group of events (an EnqueueMany's)
// in one request (opEach: the replica decides each group on its own, all
// or nothing, so each caller still gets its own verdict at once); the
// others wait for their verdict or to be asked to lead the next request.
// One goroutine alone sends its events by itself, at once.
type combiner struct {
	home    string // the instance its requests go to (Codecs.SetHome), or ""
	mu      sync.Mutex
	waiting []*pending
	leaders int
}

// tableCodec is a codec as registered in one version of the codecs'
// table (a registration since makes it stale).
type tableCodec struct {
	tab *codecTable
	cd  *Codec
}

// pending is one Enqueue or EnqueueMany waiting in a combiner.
type pending struct {
	event  sink.Event   // an Enqueue's
	events []sink.Event // an EnqueueMany's (nil for an Enqueue)
	// codec is the event's, or the last of events'
	codec *Codec
	// enc is what the request carries, encoded by the caller's own
	// goroutine: the event's bytes (length first; the leader puts the
	// codec's name before them), or every one of events with its name.
	enc   []byte
	trace pendingTrace
	err   error
	wake  chan bool // true: lead the next request; false: err is set
	asked bool      // under combiner.mu: already asked to lead
}

var pendingPool = sync.Pool{New: func() any { return &pending{wake: make(chan bool, 1)} }}

// enqueueCombined encodes e and sends it with the other Enqueues waiting
// for the same destination: its home (Codecs.SetHome), or any replica.
func (s *stageSender) enqueueCombined(e sink.Event) error {
	p := pendingPool.Get().(*pending)
	var last *Codec
	tab := s.n.wire.codecs.tab.Load()
	if c := s.lastCodec.Load(); c != nil && c.tab == tab {
		last = c.cd
	}
	cd, err := s.n.wire.codecOf(s.stage, e, last)
	var enc []byte
	if err == nil {
		enc, err = s.n.wire.appendEventData(p.enc[:0], s.stage, cd, e)
	}
	if err != nil {
		pendingPool.Put(p)
		s.rejected.Add(1)
		return err
	}
	if cd != last {
		s.lastCodec.Store(&tableCodec{tab: tab, cd: cd})
	}
	p.event, p.events, p.codec, p.enc, p.err, p.asked, p.trace = e, nil, cd, enc, nil, false, tracedPending(e)
	home := ""
	if cd.Home != nil {
		home = cd.Home(e)
	}
	return s.combinerFor(home).enqueue(s, p)
}

// enqueue sends p's event with the others waiting in c and returns its
// verdict.
func (c *combiner) enqueue(s *stageSender, p *pending) error {
	c.mu.Lock()
	c.waiting = append(c.waiting, p)
	lead := c.leaders < maxLeaders
	if lead {
		c.leaders++
	}
	c.mu.Unlock()
	if lead {
		c.lead(s)
	}
	for <-p.wake {
		c.lead(s)
	}
	err := p.err
	p.err, p.event, p.events, p.codec = nil, nil, nil, nil
	if cap(p.enc) > 4096 {
		p.enc = nil
	}
	pendingPool.Put(p)
	return err
}

// lead sends what is waiting, then hands the lead to the next waiter (or
// gives it up).
func (c *combiner) lead(s *stageSender) {
	batch := c.take(min(maxCombinedBytes, int(s.n.nc.MaxPayload()/2)))
	n := len(batch)
	if n > 0 {
		s.sendEach(batch, c.home)
	}
	if n > 1 {
		// The callers just answered are running again and most will
		// enqueue at once: let them, so that the next request carries
		// them all rather than the first alone (a request of one, then
		// one of the rest, a round trip each). Yield while more arrive,
		// until as many wait as were just answered.
		for waiting := -1; ; {
			runtime.Gosched()
			c.mu.Lock()
			now := len(c.waiting)
			c.mu.Unlock()
			if now == waiting || now >= n {
				break
			}
			waiting = now
		}
	}
	c.mu.Lock()
	var next *pending
	for _, w := range c.waiting {
		if !w.asked {
			next = w
			break
		}
	}
	if next != nil {
		next.asked = true
	} else {
		c.leaders--
	}
	c.mu.Unlock()
	if next != nil {
		next.wake <- true
	}
}

// take removes from the waiting list and returns the next request's
// callers: the first, and those after it while their encoded events add
// up to at most limit bytes (and they are at most maxCombined).
func (c *combiner) take(limit int) []*pending {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiting) == 0 {
		return nil
	}
	n, size := 1, len(c.waiting[0].enc)
	for ; n < len(c.waiting) && n < maxCombined; n++ {
		if size += len(c.waiting[n].enc); size > limit {
			break
		}
	}
	batch := make([]*pending, n)
	copy(batch, c.waiting)
	c.waiting = append(c.waiting[:0], c.waiting[n:]...)
	return batch
}

// sendEach sends a combined request (to home's replica, if home is not
// "") and wakes every waiter with its own verdict.
func (s *stageSender) sendEach(batch []*pending, home string) {
	size, events := 64, 0
	for _, p := range batch {
		size += 4 + len(p.enc)
		events += p.size()
	}
	buf := requestBuffers.Get().(*[]byte)
	defer putRequestBuffer(buf)
	data := requestHeader(slices.Grow((*buf)[:0], size), opEach, s.newID(), s.from(), s.ref)
	data = binary.AppendUvarint(data, uint64(len(batch)))
	for _, p := range batch {
		data = binary.AppendUvarint(data, uint64(p.size()))
	}
	data = binary.AppendUvarint(data, uint64(events))
	var hdr nats.Header
	var prev *Codec
	i := 0 // the event's index in the request
	for _, p := range batch {
		if p.events == nil {
			data = appendCodecName(data, p.codec, prev)
			hdr = p.trace.add(hdr, i)
		} else {
			for j, e := range p.events {
				hdr = injectTrace(hdr, i+j, e)
			}
		}
		data = append(data, p.enc...)
		prev = p.codec
		i += p.size()
	}
	*buf = data
	v, _, err := s.roundTrip(data, hdr, nil, home)
	if err == nil && v.status != statusEach {
		err = v.err() // the whole request failed (it could not be decoded)
		if err == nil {
			err = s.reject("bad verdict")
		}
	}
	if err == nil && len(v.each) != len(batch) {
		err = s.reject(fmt.Sprintf("verdict for %d groups of events, sent %d", len(v.each), len(batch)))
	}
	why := 0
	for i, p := range batch {
		switch {
		case err != nil:
			p.err = err
		case v.each[i] == statusOK:
			s.events.Add(uint64(p.size()))
			if s.n.watcher != nil && s.fixed == "" {
				if p.events == nil {
					s.n.watcher.Admitted(s.stage, v.inst, p.event)
				}
				for _, e := range p.events {
					s.n.watcher.Admitted(s.stage, v.inst, e)
				}
			}
		default:
			d := verdictDetail{}
			if why < len(v.why) {
				d = v.why[why]
				why++
			}
			ev := &verdict{status: v.each[i], detail: d}
			p.err = ev.err()
			s.rejected.Add(1)
		}
		p.wake <- false
	}
}

// size is how many events p carries.
func (p *pending) size() int {
	if p.events == nil {
		return 1
	}
	return len(p.events)
}

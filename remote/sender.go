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
	// Waits counts the requests bound to one instance (replies: events
	// with a home or sent on a SinkRef; transaction outcomes) that had to
	// wait for it: this node or the instance's cut off from NATS, or the
	// instance out of rotation for its silence (see link.go).
	Waits uint64
	// LostOutcomes counts the transaction outcomes (Commit, Abort) that
	// never reached their replica within the stage's timeout, or that it
	// refused (a Commit after the replica aborted the transaction on its
	// own): a lost Commit's events were not kept there, and its ticket
	// was cancelled.
	LostOutcomes uint64
	// UnknownOutcomes counts the transaction outcomes whose fate is
	// unknown (ErrOutcomeUnknown): one that may have reached the
	// replica but got no verdict within the stage's timeout, or that the
	// replica no longer held (forgotten). A Commit among them may have
	// been kept; its ticket was completed Done (see remoteTxn.finish).
	UnknownOutcomes uint64
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
	// homes maps a home instance to the *combiner of the events sent to
	// it (Codecs.SetHome), about 350 B of heap each with its key and map
	// entry (BenchmarkIdleHomes). A home's combiner outlives its
	// replica's record while a request to it may still be in flight (a
	// reply waits for its home): a second combiner beside them would
	// send more than maxInFlight at once to that home. The sweep retires
	// it once the home is gone and it is idle (see pruneHomes), so that
	// the map does not grow by one entry for each worker instance that
	// ever was a home (a restart is a new instance).
	homes sync.Map
	// retiredRetries counts the callers a home's combiner refused
	// because the sweep retired it between their taking it and joining
	// it (each took the home's new one, see enqueueTo);
	// testHookCombinerTaken, if set (tests), runs in that gap.
	retiredRetries        atomic.Uint64
	testHookCombinerTaken func()

	now       func() time.Time // the clock of the replicas' health (tests set a fake one)
	warns     frontWarnings
	lastSweep time.Time              // the watch's
	wasCut    bool                   // the watch's: its last sweep found the node cut off from NATS
	source    atomic.Pointer[string] // the one local stage sending here, if one (sourceStage)

	unanswered, failovers, waits, lostOutcomes, unknownOutcomes atomic.Uint64
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
	st.Waits, st.LostOutcomes, st.UnknownOutcomes = s.waits.Load(), s.lostOutcomes.Load(), s.unknownOutcomes.Load()
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
// and returns the verdict: to to, or else to home's replica (home: the
// instance its events go back to, Codecs.SetHome; "" for none), or else
// to the least loaded replica in rotation. hdr, if not nil, holds the
// events' trace contexts. A request that only one instance can take (to,
// home, or a SinkRef's node) is bound: see boundTrip.
func (s *stageSender) roundTrip(data []byte, hdr nats.Header, to *replicaState, home string) (*verdict, *replicaState, error) {
	if to != nil || home != "" || s.fixed != "" {
		return s.boundTrip(data, hdr, to, home)
	}
	rs, allOut := s.pick()
	if allOut {
		return nil, nil, s.noneInRotation()
	}
	attempts := s.cfg.Retries + 1
	per := s.cfg.Timeout / time.Duration(attempts)
	s.sent.Add(1)
	start := time.Now()
	msg := &nats.Msg{Data: data, Header: hdr}
	for attempt, failovers, movedOn := 0, 0, false; attempt < attempts; {
		msg.Subject = s.subject(rs)
		reply, err := s.request(msg, rs, per)
		switch {
		case err == nil:
			return s.verdictOf(reply, rs, start)
		case s.n.linkDown(err):
			return nil, rs, s.cutOff()
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
				rs = next
				continue
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
			if attempt++; attempt < attempts {
				s.retrans.Add(1)
			}
		default:
			return nil, rs, s.reject(err.Error())
		}
	}
	return nil, rs, s.noVerdict(rs, attempts)
}

// verdictOf decodes the verdict reply brought from rs (nil: the queue
// group) for a request first sent at start, records the round trip and
// the replica's news, and returns the verdict with the replica that gave
// it.
func (s *stageSender) verdictOf(reply *nats.Msg, rs *replicaState, start time.Time) (*verdict, *replicaState, error) {
	v, err := decodeVerdict(reply.Data)
	if err != nil {
		return nil, rs, s.reject(err.Error())
	}
	s.latency.add(time.Since(start))
	if v.inst != "" && s.fixed == "" {
		rs = s.answered(rs, v)
	}
	return v, rs, nil
}

// noVerdict is the rejection of a request that got no verdict within the
// stage's timeout (rs: where it went last), logged at WARN, rate-limited.
func (s *stageSender) noVerdict(rs *replicaState, attempts int) error {
	node := "(queue group)"
	if rs != nil {
		node = rs.node
	}
	s.warn(&s.warns.timeout, "remote: no verdict in time: enqueue rejected", "replica", node, "timeout", s.cfg.Timeout, "attempts", attempts)
	return s.reject(fmt.Sprintf("no verdict within %v (%d attempts)", s.cfg.Timeout, attempts))
}

// boundTrip is roundTrip for a request bound to one instance: a reply
// (its events' home, or a SinkRef's node) or a transaction's outcome (to:
// the replica holding it). It never goes to the stage's queue group or
// to another replica (another front could take a reply; another replica
// does not hold the transaction). Whatever keeps it from its instance —
// this node cut off from NATS, the instance's node cut off (no
// responders on its subject, or out of rotation for its silence), a
// verdict that does not come — it waits and is sent again, with the same
// idempotency key (the instance decides it once), until the stage's
// timeout: then it is rejected, counted and logged (see link.go). The
// first wait of each request is counted (SinkStats.Waits) and logged.
// A rejection after an attempt that may have reached the instance (one
// that timed out, or whose instance went out of rotation while it
// waited) wraps errMayHaveArrived: the instance may have decided it.
//
// No responders on a known replica's subject take it out of rotation
// (dead), unless this node is rejoining NATS: then the other nodes'
// subscriptions may not be back yet, and it is only a wait.
//
// One exception keeps SetHome's promise that a home not serving the
// stage leaves the choice to the load: a home this sender never heard
// of (no heartbeat, no verdict) that has no responders, while this node
// is not itself rejoining NATS and no earlier attempt may have reached
// it, is not a replica of the stage; the request then goes by load
// (roundTrip with no home).
func (s *stageSender) boundTrip(data []byte, hdr nats.Header, to *replicaState, home string) (*verdict, *replicaState, error) {
	rs := to
	if rs == nil {
		rs = s.homeReplica(home) // nil for a SinkRef: its one subject
	}
	what := boundWhat(to != nil)
	per := s.cfg.Timeout / time.Duration(s.cfg.Retries+1)
	s.sent.Add(1)
	start := time.Now()
	deadline := start.Add(s.cfg.Timeout)
	msg := &nats.Msg{Data: data, Header: hdr}
	msg.Subject = s.subject(rs)
	waiting, mayHaveArrived := false, false
	var last error // the last attempt's
	for {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		reply, err := s.requestBound(msg, rs, min(per, left))
		last = err
		switch {
		case err == nil:
			return s.verdictOf(reply, rs, start)
		case errors.Is(err, nats.ErrTimeout):
			mayHaveArrived = true
			if time.Now().Before(deadline) {
				s.retrans.Add(1)
			}
			continue
		case errors.Is(err, nats.ErrNoResponders) && to == nil && !mayHaveArrived && s.unheard(rs) && !s.n.rejoining(s.staleAfter()):
			s.sent.Add(^uint64(0)) // counted again by roundTrip
			return s.roundTrip(data, hdr, nil, "")
		case s.n.linkDown(err), errors.Is(err, nats.ErrNoResponders), errors.Is(err, errOutOfRotation):
			if errors.Is(err, errOutOfRotation) {
				mayHaveArrived = true // sent: its replica went out of rotation while it waited
			}
			if rs != nil && errors.Is(err, nats.ErrNoResponders) && !s.unheard(rs) && !s.n.rejoining(s.staleAfter()) {
				rs.dead.Store(true) // not subscribed: out of rotation at the next sweep
			}
			if !waiting {
				waiting = true
				s.waitFor(rs, what, err)
			}
			if !s.awaitRejoin(deadline) {
				return nil, rs, s.undelivered(rs, what, last, mayHaveArrived, time.Since(start))
			}
			if to == nil && home != "" {
				rs = s.homeReplica(home) // a stand-in heard since: its state
			}
		default:
			err = s.reject(err.Error())
			if mayHaveArrived {
				err = mayHaveArrivedError{err}
			}
			return nil, rs, err
		}
	}
	return nil, rs, s.undelivered(rs, what, last, mayHaveArrived, time.Since(start))
}

// errMayHaveArrived is wrapped by the rejection of a bound request after
// an attempt that may have reached its instance (see boundTrip).
var errMayHaveArrived = errors.New("an earlier attempt may have reached it")

// mayHaveArrivedError is a rejection (RejectError) of a bound request
// that wraps errMayHaveArrived too.
type mayHaveArrivedError struct{ error }

func (e mayHaveArrivedError) Unwrap() []error { return []error{e.error, errMayHaveArrived} }

// boundWhat names a bound request in logs and errors: a transaction's
// outcome if outcome, else a reply.
func boundWhat(outcome bool) string {
	if outcome {
		return "transaction outcome"
	}
	return "reply"
}

// requestBound is request for a bound request: one to a replica out of
// rotation is sent all the same (its silence may have been a partition
// now over; no responders say it is still away), without the
// rotation's end cutting its wait short. So is one to a replica found
// with no responders (dead), which the watch takes out of rotation at
// its next sweep: that sweep, coming while the resend waits for its
// answer, would otherwise end the wait as if the replica had fallen
// silent with the request (errOutOfRotation: it may have arrived), and
// a reply whose home never came back would be rejected as one that may
// have been delivered.
func (s *stageSender) requestBound(msg *nats.Msg, rs *replicaState, per time.Duration) (*nats.Msg, error) {
	if rs != nil && (rs.dead.Load() || rs.rot.Load().ctx.Err() != nil) {
		return s.request(msg, nil, per)
	}
	return s.request(msg, rs, per)
}

// unheard reports whether rs is a stand-in for a home this sender has
// not heard of yet (see homeReplica).
func (s *stageSender) unheard(rs *replicaState) bool {
	if rs == nil || s.fixed != "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replicas[rs.inst] != rs
}

// boundName names the instance of a bound request (rs; nil: a SinkRef's
// node) in logs: its node, or for a home not heard from yet its instance.
func boundName(rs *replicaState) string {
	switch {
	case rs == nil:
		return "(reference)"
	case rs.node == "":
		return rs.inst + " (not heard from yet)"
	}
	return rs.node
}

// whyBound says why a bound request's last attempt (err) did not reach
// its instance.
func (s *stageSender) whyBound(err error) string {
	switch {
	case s.n.cutOff():
		return "this node cut off from NATS"
	case errors.Is(err, nats.ErrTimeout):
		return "no verdict in time (the request may have arrived)"
	case errors.Is(err, errOutOfRotation):
		return "its replica stopped sending heartbeats while it waited (the request may have arrived)"
	case errors.Is(err, nats.ErrNoResponders) && s.n.rejoining(s.staleAfter()):
		return "no responders while this node rejoins NATS (their subscriptions may not be back yet)"
	case errors.Is(err, nats.ErrNoResponders):
		return "no responders on its subject (its node cut off from NATS, or gone)"
	case s.n.linkDown(err):
		return "this node cut off from NATS"
	}
	return err.Error()
}

// waitFor counts and logs (WARN, rate-limited) that a bound request
// (what: boundWhat) waits for its instance (rs; nil: a SinkRef's node)
// because of err.
func (s *stageSender) waitFor(rs *replicaState, what string, err error) {
	s.waits.Add(1)
	msg := "remote: reply waiting for its home"
	if what != boundWhat(false) {
		msg = "remote: " + what + " waiting for its replica"
	}
	s.warn(&s.warns.wait, msg, "replica", boundName(rs), "why", s.whyBound(err), "err", err.Error(), "timeout", s.cfg.Timeout)
}

// awaitRejoin pauses a bound request that could not reach its instance
// and waits for the link: it reports whether to send it again, false
// once deadline has passed or the node closes, or when less than
// resendRoom would be left for the attempt: a verdict (or NATS's "no
// responders") might not come back in that time on a loaded machine,
// and an attempt that times out is one that may have arrived (see
// boundTrip), which would make a request that never reached its
// instance look delivered.
func (s *stageSender) awaitRejoin(deadline time.Time) bool {
	left := time.Until(deadline)
	return left > 0 && s.n.pause(min(rejoinPause, left)) && s.n.awaitLink(deadline) && time.Until(deadline) >= s.resendRoom()
}

// resendRoom is the least time left before the deadline for a bound
// request to be sent again: a quarter of the stage's timeout, at most
// maxResendRoom and at least rejoinPause.
func (s *stageSender) resendRoom() time.Duration {
	return max(rejoinPause, min(maxResendRoom, s.cfg.Timeout/4))
}

// maxResendRoom bounds resendRoom: a "no responders" answer takes well
// under a millisecond on a quiet machine and tens of milliseconds on a
// loaded one.
const maxResendRoom = 200 * time.Millisecond

// cutOff is the rejection of a request not bound to an instance that
// this node could not send because it is cut off from NATS, logged at
// WARN, rate-limited.
func (s *stageSender) cutOff() error {
	s.warn(&s.warns.cut, "remote: cut off from NATS: enqueue rejected")
	return s.reject("this node is cut off from NATS (reconnecting)")
}

// undelivered is the rejection of a bound request (what: boundWhat) that
// got no verdict from its instance (rs) within the stage's timeout,
// last: its last attempt's error, logged at WARN, rate-limited, saying
// what was not delivered, where, and why. It wraps errMayHaveArrived if
// an attempt may have reached the instance.
func (s *stageSender) undelivered(rs *replicaState, what string, last error, mayHaveArrived bool, waited time.Duration) error {
	why := "the node is closing"
	if last != nil {
		why = s.whyBound(last)
	}
	fate := "not delivered"
	if mayHaveArrived {
		fate = "not confirmed (it may have arrived)"
	}
	s.warn(&s.warns.undelivered, "remote: "+what+" "+fate+" in time", "replica", boundName(rs), "why", why,
		"waited", waited.Round(time.Millisecond))
	err := s.reject(fmt.Sprintf("%s to %s %s within %v: %s", what, boundName(rs), fate, s.cfg.Timeout, why))
	if mayHaveArrived {
		return mayHaveArrivedError{err}
	}
	return err
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
	p.event, p.events, p.codec, p.enc, p.err, p.trace = nil, es, last, enc, nil, pendingTrace{}
	return s.enqueueTo(s, s.n.wire.home(es[0]), p)
}

// enqueueTo sends p with the others waiting for the same destination
// (home; "": any replica) through its combiner, or through a new one if
// the sweep retired the one p found (pruneHomes): none has a caller
// left then. b sends the requests: s (a test's fake in unit tests).
func (s *stageSender) enqueueTo(b batchSender, home string, p *pending) error {
	for {
		c := s.combinerFor(home)
		if s.testHookCombinerTaken != nil {
			s.testHookCombinerTaken()
		}
		if err := c.enqueue(b, p); err != errRetired {
			return err
		}
		s.retiredRetries.Add(1)
	}
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

// pruneHomes retires (and forgets) the combiners of the homes that are
// gone and idle: no replica record (forgotten, forgetAfter out of
// rotation; or never heard from), no caller waiting or in flight, and
// no new caller for forgetAfter, as seen by the sweeps (now: this
// one's). A combiner with a caller left is kept, so that no second one
// sends beside its requests in flight (TestForgottenHomeKeepsItsCombiner);
// one retired refuses callers (errRetired), who take the new one.
func (s *stageSender) pruneHomes(now time.Time) {
	s.homes.Range(func(k, v any) bool {
		home, c := k.(string), v.(*combiner)
		s.mu.Lock()
		_, known := s.replicas[home]
		s.mu.Unlock()
		c.mu.Lock()
		defer c.mu.Unlock()
		switch {
		case c.waiting > 0 || c.leaders > 0 || c.joins != c.idleJoins || c.idleSince.IsZero():
			c.idleJoins, c.idleSince = c.joins, now
		case !known && now.Sub(c.idleSince) >= forgetAfter:
			c.retired = true
			s.homes.CompareAndDelete(home, c)
		}
		return true
	})
}

// EnqueueLossy is Enqueue reporting only whether e was admitted.
func (s *stageSender) EnqueueLossy(e sink.Event) bool { return s.lossy(s.Enqueue(e)) }

// Prepare asks one replica to admit es and hold room for them; the Txn's
// Commit makes them visible there, Abort gives the room back. A replica
// aborts a transaction nobody committed within the duplicates window.
// Commit and Abort go to that replica alone, and wait for it like a
// reply (see boundTrip); an outcome it did not confirm is the Txn's Err.
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
	if rs == nil {
		// Taken through the queue group by a replica not heard of yet:
		// its outcome goes to it all the same.
		rs = s.homeReplica(v.inst)
	}
	txn := &remoteTxn{s: s, id: id, rs: rs, n: len(es), ticket: tk, start: start}
	if tk.Predicate() != nil {
		txn.es = slices.Clone(es) // the caller may reuse es
	}
	return txn, nil
}

// ErrOutcomeUnknown is wrapped by a transaction's Err (and so by what
// Commit or Abort left there) when its outcome is unknown: the replica
// holding it may have kept it. Either a request for the outcome may have
// reached the replica but no verdict came back within the stage's
// timeout, or the replica no longer remembered the transaction (never
// prepared there, or its record forgotten early under load). Such an
// error also wraps the rejection it came from (sink.ErrRejected). An
// outcome the replica refused (it had aborted the transaction) or that
// never reached it is not unknown: its events were not kept.
var ErrOutcomeUnknown = errors.New("remote: transaction outcome unknown: the replica may have kept it")

// remoteTxn is a transaction a replica prepared. Its events hold the
// sender-side predicate's credit (ticket) until Commit or Abort: see
// finish.
type remoteTxn struct {
	s      *stageSender
	id     string
	rs     *replicaState // the replica holding it
	n      int
	es     []sink.Event // for the predicate, if any
	ticket sink.Ticket
	start  time.Time
	once   sync.Once
	err    atomic.Pointer[error] // the outcome's, if not confirmed
}

// finish sends the transaction's outcome (opCommit, opAbort) to the
// replica holding it, waiting for it across outages up to the stage's
// timeout, with the transaction's id (the replica decides the outcome
// once), and settles its ticket. The outcome is one of:
//
//   - confirmed: a Commit's ticket is Done, an Abort's cancelled;
//   - not kept: a Commit the replica refused (it had aborted the
//     transaction), or one that never reached it (no attempt may have
//     arrived): its ticket is cancelled, the error counted
//     (SinkStats.LostOutcomes), logged and kept for Err;
//   - unknown (ErrOutcomeUnknown): an attempt may have arrived but no
//     verdict came, or the replica no longer held the transaction. It
//     is counted (SinkStats.UnknownOutcomes), logged at WARN as such,
//     and kept for Err. A Commit's ticket is then Done, with the whole
//     wait as its service time: its events may be in the replica's
//     queue, and the work can no longer be counted as outstanding; Done
//     keeps a predicate that limits the load on the replicas from
//     handing the credit back as if nothing had been sent, and tells one
//     that watches response times how long the commit took, while
//     Cancel would let more through to a replica that may be overloaded.
//
// An Abort is done once any verdict comes back (the transaction is over
// there); its ticket is always cancelled. One that never reaches the
// replica is counted (LostOutcomes) and logged too (the replica gives
// the room back at the end of its duplicates window).
func (t *remoteTxn) finish(op byte) {
	t.once.Do(func() {
		v, _, err := t.s.call(op, t.id, nil, t.rs)
		// An Abort is never unknown: its events are not kept either way.
		unknown, refused := op == opCommit && errors.Is(err, errMayHaveArrived), false
		if err == nil && op == opCommit {
			unknown = v.status == statusNotHeld
			if err = v.err(); err != nil && !unknown {
				refused = true
				t.s.rejected.Add(1)
			}
		}
		switch {
		case unknown:
			t.s.unknownOutcomes.Add(1)
			err = fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
			t.err.Store(&err)
			t.s.n.log.Warn("remote: transaction outcome unknown: the replica may have kept it", "stage", t.s.stage,
				"outcome", outcomeName(op), "replica", boundName(t.rs), "id", t.id, "err", err)
		case err != nil:
			t.s.lostOutcomes.Add(1)
			t.err.Store(&err)
			msg := "remote: transaction outcome not delivered"
			if refused {
				msg = "remote: transaction commit refused by its replica: not kept"
			}
			t.s.n.log.Error(msg, "stage", t.s.stage, "outcome", outcomeName(op), "replica", boundName(t.rs), "id", t.id, "err", err)
		case op == opCommit:
			t.s.events.Add(uint64(t.n))
		}
		settle := err
		switch {
		case op == opAbort:
			settle = sink.ErrRejected // not kept, whatever the replica answered
		case unknown:
			settle = nil // Done: see above
		}
		complete(t.ticket, t.es, settle, t.start)
	})
}

func (t *remoteTxn) Commit() { t.finish(opCommit) }
func (t *remoteTxn) Abort()  { t.finish(opAbort) }

// Err returns, once Commit or Abort has returned, why the outcome was
// not confirmed by the replica holding the transaction, or nil: an
// error wrapping ErrOutcomeUnknown if the replica may have kept it,
// else a Commit's events were not kept.
func (t *remoteTxn) Err() error {
	if p := t.err.Load(); p != nil {
		return *p
	}
	return nil
}

// outcomeName names a transaction's outcome for logs.
func outcomeName(op byte) string {
	if op == opCommit {
		return "commit"
	}
	return "abort"
}

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

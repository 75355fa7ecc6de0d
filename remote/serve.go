package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// replica serves one hosted stage to other nodes in request mode: it
// subscribes to the stage's queue group (senders that know no replica
// yet) and to its own direct subject (senders that chose it by load),
// and publishes its queue length every heartbeat.
type replica struct {
	n     *Node
	name  string
	st    *stage.Stage
	subs  []*nats.Subscription
	seen  *dedup
	txMu  sync.Mutex
	txns  map[string]*heldTxn
	stopC chan struct{}
	done  chan struct{}
	once  sync.Once
	from  sync.Map // sending stage → *atomic.Uint64, the events admitted from it

	dedupWarned    atomic.Int64  // when warnDedupFull last logged (unix ns)
	versionRefused atomic.Uint64 // requests of a newer wire version refused
}

type heldTxn struct {
	t     sink.Txn
	timer *time.Timer
}

// serve starts the replica of a hosted stage (request mode; a durable
// stage is also fed from its stream).
func (n *Node) serve(m *stage.Manager, name string, sc *stage.StageConfig) error {
	st, ok := m.Stage(name)
	if !ok {
		return fmt.Errorf("remote: hosted stage %q not in the manager", name)
	}
	rc := StageConfigOf(sc)
	if rc.Mode == ModeDurable {
		return n.serveDurable(st, rc)
	}
	r := &replica{n: n, name: name, st: st, seen: newDedup(rc.Duplicates, dedupLimit, time.Now), txns: map[string]*heldTxn{},
		stopC: make(chan struct{}), done: make(chan struct{})}
	r.seen.onEarly = r.warnDedupFull
	// Several subscriptions per subject, in queue groups: requests are
	// decoded and decided on as many goroutines as there are CPUs.
	subjects := []struct{ subj, queue string }{
		{n.stageSubject(name), name},
		{n.directSubject(name, n.inst), "direct"},
	}
	for range max(2, runtime.GOMAXPROCS(0)) {
		for _, sub := range subjects {
			s, err := n.nc.QueueSubscribe(sub.subj, sub.queue, r.handle)
			if err != nil {
				r.stop()
				return fmt.Errorf("remote: serve %q: %w", name, err)
			}
			_ = s.SetPendingLimits(-1, -1) // admission is the stage's business, not the client's buffer
			r.subs = append(r.subs, s)
		}
	}
	// The server has our interest before anyone is told we are here.
	if err := n.nc.Flush(); err != nil {
		r.stop()
		return fmt.Errorf("remote: serve %q: %w", name, err)
	}
	registerReplicaMetrics(m, r)
	n.mu.Lock()
	n.replicas = append(n.replicas, r)
	n.mu.Unlock()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		r.beat()
	}()
	n.log.Info("remote: serving stage", "stage", name)
	return nil
}

// beat publishes the replica's queue length every heartbeat until stopped.
func (r *replica) beat() {
	defer close(r.done)
	t := time.NewTicker(r.n.cfg.Heartbeat)
	defer t.Stop()
	subj := r.n.loadSubject(r.name)
	for {
		b := appendString(nil, r.n.inst)
		b = appendString(b, r.n.node)
		b = binary.AppendUvarint(b, uint64(r.st.Sink().Len()))
		b = binary.AppendUvarint(b, WireVersion) // last: older nodes stop reading before it
		_ = r.n.nc.Publish(subj, b)
		select {
		case <-t.C:
		case <-r.stopC:
			return
		case <-r.n.ctx.Done():
			return
		}
	}
}

// stop unsubscribes (draining what arrived) and ends the heartbeat.
func (r *replica) stop() error {
	var errs []error
	r.once.Do(func() {
		for _, s := range r.subs {
			if err := s.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				errs = append(errs, err)
			}
		}
		close(r.stopC)
		r.txMu.Lock()
		ids := slices.Collect(maps.Keys(r.txns))
		r.txMu.Unlock()
		for _, id := range ids {
			r.end(id, opAbort, "(its replica stopped)")
		}
	})
	return errors.Join(errs...)
}

func (r *replica) handle(m *nats.Msg) {
	v, version := r.decide(m.Data, m.Header)
	v.inst = r.n.inst
	v.len = r.st.Sink().Len()
	if v.status != statusOK {
		v.detail.Node = r.n.node
		if v.detail.Stage == "" {
			v.detail.Stage = r.name
		}
	}
	_ = m.Respond(encodeVerdict(v, version))
}

// decide decodes a request and decides it; it returns the verdict and
// the wire version to write it in.
func (r *replica) decide(data []byte, hdr nats.Header) (*verdict, int) {
	q, err := r.n.wire.decodeRequest(data)
	defer q.release()
	if err != nil {
		return r.n.undecodable(r.name, &r.versionRefused, err), q.version
	}
	return r.decideRequest(q, hdr), q.version
}

func (r *replica) decideRequest(q *request, hdr nats.Header) *verdict {
	extractTraces(hdr, q.events)
	switch q.op {
	case opEnqueue, opPrepare:
		return r.seen.once(q.id, func() *verdict {
			v := r.admit(q)
			if v.status == statusOK && q.op == opEnqueue {
				r.count(q.from, len(q.events))
			}
			return v
		})
	case opEach:
		return r.seen.once(q.id, func() *verdict {
			v, admitted := admitEach(r.st.Sink(), r.n.node, r.name, q.events, q.groups)
			r.count(q.from, admitted)
			return v
		})
	case opCommit, opAbort:
		v, _ := r.end(q.id, q.op, "(by its sender)")
		return v
	}
	return &verdict{status: statusError, detail: verdictDetail{Reason: fmt.Sprintf("unknown operation %d", q.op)}}
}

// outcomeKey is what a transaction's id is followed by in the key of its
// outcome, in the replica's record of verdicts (the id alone is its
// Prepare's): no idempotency key holds it.
const outcomeKey = "#outcome"

// end decides the outcome (op: opCommit or opAbort) of transaction id,
// once: the first of its Commit, its Abort, its expiry (why: the
// reason) or the replica's stop settles it, and every later request
// for its outcome (a Commit sent again, its verdict lost or its sender
// waiting across an outage) gets the same verdict: ok once committed; a
// rejection naming why once aborted (the sender of an Abort takes any
// verdict as done); statusNotHeld for a transaction this replica does
// not hold (never prepared here, or forgotten: its idempotency record
// retired early under load, so a Commit sent again may find it gone
// after it was kept): the sender takes that as an unknown outcome, not a
// refusal. settled reports whether this call settled it.
func (r *replica) end(id string, op byte, why string) (v *verdict, settled bool) {
	v = r.seen.once(id+outcomeKey, func() *verdict {
		r.txMu.Lock()
		h := r.txns[id]
		delete(r.txns, id)
		r.txMu.Unlock()
		if h == nil {
			return &verdict{status: statusNotHeld, detail: verdictDetail{Reason: "no such transaction held here (never prepared here, or forgotten: its outcome unknown)"}}
		}
		h.timer.Stop()
		settled = true
		if op == opCommit {
			h.t.Commit()
			return &verdict{status: statusOK}
		}
		h.t.Abort()
		return &verdict{status: statusRejected, detail: verdictDetail{Reason: "transaction aborted " + why}}
	})
	return v, settled
}

func (r *replica) admit(q *request) *verdict {
	s := r.st.Sink()
	var err error
	switch {
	case q.op == opPrepare:
		var t sink.Txn
		if t, err = s.Prepare(q.events); err == nil {
			h := &heldTxn{t: t}
			h.timer = time.AfterFunc(r.seen.window, func() {
				if _, settled := r.end(q.id, opAbort, "(not committed within the duplicates window)"); settled {
					r.n.log.Warn("remote: prepared events never committed: aborted", "stage", r.name, "id", q.id)
				}
			})
			r.txMu.Lock()
			r.txns[q.id] = h
			r.txMu.Unlock()
		}
	case len(q.events) == 1:
		err = s.Enqueue(q.events[0])
	default:
		err = s.EnqueueMany(q.events)
	}
	return verdictOf(err)
}

// count adds n events admitted from stage from (of another node).
func (r *replica) count(from string, n int) {
	if from == "" || n <= 0 {
		return
	}
	c, ok := r.from.Load(from)
	if !ok {
		c, _ = r.from.LoadOrStore(from, new(atomic.Uint64))
	}
	c.(*atomic.Uint64).Add(uint64(n))
}

// deliveredFrom returns the events the replicas of this node admitted
// from stage from (hosted on other nodes), by replica stage.
func (n *Node) deliveredFrom(from string) map[string]uint64 {
	n.mu.Lock()
	reps := slices.Clone(n.replicas)
	n.mu.Unlock()
	out := map[string]uint64{}
	for _, r := range reps {
		if c, ok := r.from.Load(from); ok {
			out[r.name] += c.(*atomic.Uint64).Load()
		}
	}
	return out
}

// admitEach enqueues every group of es (sizes in groups, in order; nil:
// every event alone) on its own, all or nothing, and reports each group's
// outcome and how many events were admitted. A run of events alone goes
// to a sink.EachEnqueuer (a stage's sink) in one pass, under one lock of
// its queue, each event still decided on its own.
func admitEach(s sink.Sink, node, name string, es []sink.Event, groups []int) (v *verdict, admitted int) {
	n := len(groups)
	if groups == nil {
		n = len(es)
	}
	v = &verdict{status: statusEach, each: make([]byte, n)}
	refuse := func(i int, err error) {
		ev := verdictOf(err)
		v.each[i] = ev.status
		ev.detail.Node, ev.detail.Stage = node, name
		v.why = append(v.why, ev.detail)
	}
	alone := func(i int) bool { return groups == nil || groups[i] == 1 }
	each, _ := s.(sink.EachEnqueuer)
	for i := 0; i < n; {
		if each != nil && alone(i) {
			j := i + 1
			for j < n && alone(j) {
				j++
			}
			admitted += admitRun(each, es[:j-i], func(k int, err error) { refuse(i+k, err) })
			es, i = es[j-i:], j
			continue
		}
		g := 1
		if groups != nil {
			g = groups[i]
		}
		group := es[:g]
		es = es[g:]
		var err error
		if g == 1 {
			err = s.Enqueue(group[0])
		} else {
			err = s.EnqueueMany(group)
		}
		if err == nil {
			admitted += g // statusOK is 0: nothing to build for the usual case
		} else {
			refuse(i, err)
		}
		i++
	}
	return v, admitted
}

// admitRun enqueues each event of run on its own in one pass and calls
// refused, in order, for each one not admitted; it returns how many were.
func admitRun(s sink.EachEnqueuer, run []sink.Event, refused func(k int, err error)) int {
	buf := errBuffers.Get().(*[]error)
	errs := slices.Grow((*buf)[:0], len(run))[:len(run)]
	admitted := s.EnqueueEach(run, errs)
	if admitted < len(run) {
		for k, err := range errs {
			if err != nil {
				refused(k, err)
			}
		}
	}
	clear(errs)
	*buf = errs[:0]
	errBuffers.Put(buf)
	return admitted
}

// errBuffers holds the verdict slices of admitRun.
var errBuffers = sync.Pool{New: func() any { return new([]error) }}

// verdictOf turns a local enqueue's error into a verdict.
func verdictOf(err error) *verdict {
	if err == nil {
		return &verdict{status: statusOK}
	}
	v := &verdict{status: statusRejected, detail: verdictDetail{Reason: err.Error()}}
	if errors.Is(err, sink.ErrClosed) {
		v.status = statusClosed
	}
	if re, ok := errors.AsType[*sink.RejectError](err); ok {
		v.detail.Predicate, v.detail.Reason = re.Predicate, re.Reason
		if v.detail.Predicate == "" && v.detail.Reason == "" {
			v.detail.Reason = "queue full"
		}
	}
	return v
}

// serveRef answers requests aimed at the sinks this node exported.
func (n *Node) serveRef(m *nats.Msg) {
	q, err := n.wire.decodeRequest(m.Data)
	var v *verdict
	if err != nil {
		v = n.undecodable("(exported sinks)", nil, err)
	} else {
		v = n.decideRef(q, m.Header)
	}
	q.release()
	v.inst = n.inst
	if v.status != statusOK {
		v.detail.Node = n.node
	}
	_ = m.Respond(encodeVerdict(v, q.version))
}

// undecodable is the verdict on a request that could not be decoded; one
// of a wire version this node does not speak is also counted (in count
// too, if not nil) and logged.
func (n *Node) undecodable(where string, count *atomic.Uint64, err error) *verdict {
	if _, ok := errors.AsType[*VersionError](err); ok {
		n.refusedVersion(where, count, err)
	}
	return &verdict{status: statusError, detail: verdictDetail{Reason: err.Error()}}
}

func (n *Node) decideRef(q *request, hdr nats.Header) *verdict {
	extractTraces(hdr, q.events)
	s := n.wire.exported(q.ref)
	if s == nil {
		return &verdict{status: statusClosed, detail: verdictDetail{Stage: fmt.Sprintf("ref #%d", q.ref), Reason: "no such exported sink"}}
	}
	// A request sent again (its verdict lost, or its sender waiting for
	// the link) gets the first verdict: its events are admitted once.
	return n.refSeen.once(q.id, func() *verdict { return decideOn(s, n.node, q) })
}

// decideOn admits the events of request q to the exported sink s.
func decideOn(s sink.Sink, node string, q *request) *verdict {
	if q.op == opEach {
		v, _ := admitEach(s, node, sinkName(s), q.events, q.groups)
		return v
	}
	if q.op != opEnqueue {
		return &verdict{status: statusError, detail: verdictDetail{Reason: "references take enqueues only"}}
	}
	var v *verdict
	if len(q.events) == 1 {
		v = verdictOf(s.Enqueue(q.events[0]))
	} else {
		v = verdictOf(s.EnqueueMany(q.events))
	}
	v.detail.Stage = sinkName(s)
	return v
}

// warnDedupFull logs, at most once a minute, that the replica forgets
// idempotency keys before the duplicates window: a retransmission older
// than the newest dedupLimit requests would be decided again.
func (r *replica) warnDedupFull() {
	now := time.Now().UnixNano()
	last := r.dedupWarned.Load()
	if now-last < int64(time.Minute) || !r.dedupWarned.CompareAndSwap(last, now) {
		return
	}
	r.n.log.Warn("remote: idempotency record full before its window: oldest keys forgotten early",
		"stage", r.name, "keys", 2*dedupLimit, "window", r.seen.window, "early", r.seen.early.Load())
}

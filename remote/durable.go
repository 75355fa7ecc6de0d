package remote

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// ---- the stream ----

// ensureStream creates (or updates) the work-queue stream of a durable
// stage: its size limit is the stage's queue threshold (in messages; an
// EnqueueMany is one message), a full stream refuses new messages, and
// publishes with one id inside the duplicates window are stored once.
func (n *Node) ensureStream(name string, sc *stage.StageConfig, rc StageConfig) error {
	limit := int64(sc.Queue.Threshold)
	if limit <= 0 {
		limit = -1
	}
	cfg := &nats.StreamConfig{
		Name:       n.streamName(name),
		Subjects:   []string{n.durableSubject(name)},
		Retention:  nats.WorkQueuePolicy,
		MaxMsgs:    limit,
		Discard:    nats.DiscardNew,
		Duplicates: rc.Duplicates,
		Storage:    nats.FileStorage,
	}
	_, err := n.js.AddStream(cfg)
	if errors.Is(err, nats.ErrStreamNameAlreadyInUse) {
		_, err = n.js.UpdateStream(cfg)
	}
	if err != nil {
		return fmt.Errorf("remote: durable stage %q: stream %s: %w", name, cfg.Name, err)
	}
	return nil
}

// ---- sender ----

// durableSender is the sink of a durable stage hosted elsewhere: an
// enqueue is a JetStream publish whose acknowledgement is the verdict.
type durableSender struct {
	senderCore
	subject string
	limit   int

	lenMu   sync.Mutex
	lenAt   time.Time
	lastLen int

	redMu    sync.Mutex
	redAt    time.Time
	lastRed  uint64
	lastDead uint64
}

var _ sink.Sink = (*durableSender)(nil)

func (n *Node) durableSink(name string, sc *stage.StageConfig, rc StageConfig) (sink.Sink, error) {
	if err := n.ensureStream(name, sc, rc); err != nil {
		return nil, err
	}
	return &durableSender{senderCore: senderCore{n: n, stage: name, cfg: rc, latency: newLatencies()},
		subject: n.durableSubject(name), limit: sc.Queue.Threshold}, nil
}

func (s *durableSender) String() string { return "remote durable stage " + s.stage }

// publish runs the sender-side predicate on es, stores them and settles
// the predicate's tickets.
func (s *durableSender) publish(es []sink.Event) error {
	t, err := s.admit(es)
	if err != nil {
		return err
	}
	start := time.Now()
	err = s.store(es)
	complete(t, es, err, start)
	return err
}

// store publishes es to the stream as one message.
func (s *durableSender) store(es []sink.Event) error {
	data, err := s.n.wire.encodeEvents(nil, s.stage, es)
	if err != nil {
		s.rejected.Add(1)
		return err
	}
	id := s.newID()
	s.sent.Add(1)
	start := time.Now()
	// The client retries a publish that got no acknowledgement with the
	// same id: the stream stores it once.
	// remote.timeout is the consumers' acknowledgement wait, and bounds
	// the whole store (its attempts and the waits for the link between
	// them); an attempt waits for the stream at least two seconds, or
	// what is left of the timeout if less.
	deadline := start.Add(s.cfg.Timeout)
	wait := max(s.cfg.Timeout/time.Duration(s.cfg.Retries+1), 2*time.Second)
	msg := &nats.Msg{Subject: s.subject, Data: data, Header: withWireVersion(injectTraces(es))}
	for attempt := 0; ; attempt++ {
		ackWait := min(wait, time.Until(deadline))
		if ackWait <= 0 {
			err = nats.ErrTimeout // the link waits took the time left
			break
		}
		_, err = s.n.js.PublishMsg(msg, nats.MsgId(id), nats.AckWait(ackWait), nats.RetryAttempts(s.cfg.Retries), nats.RetryWait(10*time.Millisecond))
		if !errors.Is(err, nats.ErrTimeout) || attempt >= s.cfg.Retries || !s.n.awaitLink(deadline) || !time.Now().Before(deadline) {
			break
		}
		// No acknowledgement: the connection dropped with the publish in
		// flight (a restarting server), and the stream may have stored
		// it. Once the link is back, the same id again settles it: stored
		// once, acknowledged either way.
		s.retrans.Add(1)
	}
	switch {
	case err == nil:
		s.latency.add(time.Since(start))
		s.events.Add(uint64(len(es)))
		return nil
	case strings.Contains(err.Error(), "maximum messages exceeded"):
		return s.reject(fmt.Sprintf("stream full (queue threshold %d)", s.limit))
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrNoStreamResponse):
		return s.reject("the stream is not available (JetStream down?)")
	case errors.Is(err, nats.ErrTimeout):
		return s.reject(fmt.Sprintf("no acknowledgement from the stream within %v (the event may have been stored)", s.cfg.Timeout))
	case s.n.linkDown(err):
		return s.reject("this node is cut off from NATS (reconnecting): not stored")
	}
	return s.reject(err.Error())
}

// Enqueue stores e in the stage's stream: nil once the stream has it, a
// rejection wrapping sink.ErrRejected when the stream is full or down.
func (s *durableSender) Enqueue(e sink.Event) error { return s.publish([]sink.Event{e}) }

// EnqueueMany stores es as one message: all or none.
func (s *durableSender) EnqueueMany(es []sink.Event) error {
	if len(es) == 0 {
		return nil
	}
	return s.publish(es)
}

// EnqueueLossy is Enqueue reporting only whether e was stored.
func (s *durableSender) EnqueueLossy(e sink.Event) bool { return s.lossy(s.Enqueue(e)) }

// Prepare runs the sender-side predicate on es, checks that they can be
// encoded and the stream has room; Commit publishes them (a stream cannot
// hold room for later), so a Commit can still meet a full stream: that is
// logged and counted as a rejection, and the predicate gets the events
// back (Cancel), as it does on Abort.
func (s *durableSender) Prepare(es []sink.Event) (sink.Txn, error) {
	tk, err := s.admit(es)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if _, err = s.n.wire.encodeEvents(nil, s.stage, es); err != nil {
		s.rejected.Add(1)
	} else if s.limit > 0 && s.Len()+1 > s.limit {
		err = s.reject(fmt.Sprintf("stream full (queue threshold %d)", s.limit))
	}
	if err != nil {
		complete(tk, es, err, start)
		return nil, err
	}
	return &durableTxn{s: s, es: slices.Clone(es), ticket: tk, start: start}, nil
}

type durableTxn struct {
	s      *durableSender
	es     []sink.Event
	ticket sink.Ticket
	start  time.Time
	once   sync.Once
}

func (t *durableTxn) Commit() {
	t.once.Do(func() {
		err := t.s.store(t.es)
		if err != nil {
			t.s.n.log.Error("remote: durable commit refused", "stage", t.s.stage, "events", len(t.es), "err", err)
		}
		complete(t.ticket, t.es, err, t.start)
	})
}

func (t *durableTxn) Abort() {
	t.once.Do(func() { complete(t.ticket, t.es, sink.ErrRejected, t.start) })
}

// Len returns the number of messages in the stream (queued or in
// service), refreshed at most once per heartbeat.
func (s *durableSender) Len() int {
	s.lenMu.Lock()
	defer s.lenMu.Unlock()
	if time.Since(s.lenAt) < s.n.cfg.Heartbeat {
		return s.lastLen
	}
	if si, err := s.n.js.StreamInfo(s.n.streamName(s.stage)); err == nil {
		s.lastLen = int(si.State.Msgs)
	}
	s.lenAt = time.Now()
	return s.lastLen
}

// Stats returns the sink's counters, with the stage's redeliveries.
func (s *durableSender) Stats() SinkStats {
	st := s.senderCore.Stats()
	st.Redelivered, st.DeadLettered = s.redelivered()
	return st
}

// redelivered returns how many deliveries of the stage's consumer were
// redeliveries, refreshed at most once per heartbeat: every delivery
// takes a consumer sequence number and the first delivery of a message
// its stream sequence number, in order, so the redeliveries are the
// difference between the last of each (the last known count while the
// consumer cannot be asked, or does not exist yet).
//
// It also returns the count of the stage's dead letters: the last
// sequence number of its dead-letter stream.
func (s *durableSender) redelivered() (uint64, uint64) {
	s.redMu.Lock()
	defer s.redMu.Unlock()
	if time.Since(s.redAt) < s.n.cfg.Heartbeat {
		return s.lastRed, s.lastDead
	}
	ctx, cancel := context.WithTimeout(s.n.ctx, time.Second)
	defer cancel()
	if ci, err := s.n.js.ConsumerInfo(s.n.streamName(s.stage), s.stage, nats.Context(ctx)); err == nil &&
		ci.Delivered.Consumer >= ci.Delivered.Stream {
		s.lastRed = max(s.lastRed, ci.Delivered.Consumer-ci.Delivered.Stream)
	}
	if si, err := s.n.js.StreamInfo(s.n.deadStreamName(s.stage), nats.Context(ctx)); err == nil {
		s.lastDead = max(s.lastDead, si.State.LastSeq)
	}
	s.redAt = time.Now()
	return s.lastRed, s.lastDead
}

// SetPredicate sets a predicate run before publishing (nil: none).
func (s *durableSender) SetPredicate(p sink.Predicate) { s.adm.SetPredicate(s, p) }

// ---- replica ----

// durableReplica feeds a hosted durable stage from its stream through a
// pull consumer shared by every replica (each pulls only what its queue
// has room for: the load decides who gets what), acknowledges an event
// once its handler succeeded, and naks with a delay what the stage's
// predicate refuses.
type durableReplica struct {
	n     *Node
	name  string
	st    *stage.Stage
	rc    StageConfig
	sub   *nats.Subscription
	stopC chan struct{}
	once  sync.Once

	mu        sync.Mutex
	adv       *nats.Subscription  // max-deliveries advisories
	pending   map[any][]*delivery // admitted events waiting for their handler
	inService map[*delivery]struct{}

	// lastProgress is when an event last entered or left a handler of
	// the stage (UnixNano; 0: never): a replica vouches for its queued
	// deliveries only while its stage makes progress.
	lastProgress atomic.Int64
	// queuedLimit is how long a delivery with events not yet in a handler
	// is renewed at most: the stage may have dropped them
	// (queue.max_time, a shedding predicate), and they must come back.
	queuedLimit time.Duration

	redelivered, naked, acked, deadLettered atomic.Uint64
	inProgress                              atomic.Uint64 // ack waits renewed for queued deliveries
	givenBack                               atomic.Uint64 // deliveries given back after queuedLimit
	versionRefused                          atomic.Uint64 // deliveries of a newer wire version
	warnDead                                rateLimit
}

// delivery is one stream message in service: acked when all its events
// were handled, nak'd if one failed (or, on its last delivery, moved to
// the dead letters with the error).
type delivery struct {
	msg      *nats.Msg
	left     int
	err      error     // the last failure, nil if none
	admitted time.Time // when the stage's queue took its events
	keys     []any     // its tracked events' keys, in d.pending
	queued   int       // its tracked events not yet in a handler
	// started is when the last of its tracked events entered a handler
	// (zero while one still waits in the queue).
	started time.Time
}

// wrapDurable rewrites the handler names of the durable stages hosted
// here so that their handlers acknowledge what they handled; it returns
// the registry holding the wrapped factories.
func (n *Node) wrapDurable(cfg *stage.Config, r *stage.Registry) (*stage.Registry, error) {
	var wrapped *stage.Registry
	for i := range cfg.Stages {
		ns := &cfg.Stages[i]
		sc := &ns.Config
		if !sc.HostedOn(n.node) || len(sc.Nodes) == 0 || StageConfigOf(sc).Mode != ModeDurable {
			continue
		}
		f, ok := r.Lookup(sc.Handler)
		if !ok {
			continue // NewFromConfig reports it
		}
		if wrapped == nil {
			wrapped = stage.NewRegistry()
			for _, name := range r.Names() {
				g, _ := r.Lookup(name)
				wrapped.Register(name, g)
			}
		}
		d := &durableReplica{n: n, name: ns.Name, rc: StageConfigOf(sc), pending: map[any][]*delivery{},
			inService: map[*delivery]struct{}{}, stopC: make(chan struct{})}
		name := "remote.durable/" + ns.Name
		wrapped.Register(name, func() stage.Handler { return wrapAcking(f(), d) })
		sc.Handler = name
		n.mu.Lock()
		n.durables = append(n.durables, d)
		n.mu.Unlock()
	}
	if wrapped == nil {
		return r, nil
	}
	return wrapped, nil
}

func (n *Node) durableFor(name string) *durableReplica {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, d := range n.durables {
		if d.name == name {
			return d
		}
	}
	return nil
}

// serveDurable starts pulling a hosted durable stage's stream.
func (n *Node) serveDurable(st *stage.Stage, rc StageConfig) error {
	d := n.durableFor(st.Name())
	if d == nil {
		return fmt.Errorf("remote: durable stage %q was not built by Node.NewManager", st.Name())
	}
	sc := st.Config()
	if err := n.ensureStream(st.Name(), &sc, rc); err != nil {
		return err
	}
	if err := n.ensureDeadStream(st.Name()); err != nil {
		return err
	}
	if err := n.ensureConsumer(st.Name(), rc); err != nil {
		return err
	}
	d.st = st
	d.queuedLimit = queuedRenewLimit(rc.Timeout, sc.Queue.MaxTime)
	registerDurableMetrics(st.Manager(), d)
	// Messages that ran out of deliveries without an answer: one replica
	// moves each to the dead letters.
	adv, err := n.nc.QueueSubscribe(n.maxDeliveriesSubject(st.Name()), n.streamName(st.Name())+"_DLQ", d.onMaxDeliveries)
	if err != nil {
		return fmt.Errorf("remote: durable stage %q: advisories: %w", st.Name(), err)
	}
	sub, err := n.js.PullSubscribe(n.durableSubject(st.Name()), st.Name(), nats.Bind(n.streamName(st.Name()), st.Name()))
	if err != nil {
		_ = adv.Unsubscribe()
		return fmt.Errorf("remote: durable stage %q: consumer: %w", st.Name(), err)
	}
	d.mu.Lock()
	d.sub, d.adv = sub, adv
	d.mu.Unlock()
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		d.pull(sc.Queue.Threshold)
	}()
	go func() {
		defer n.wg.Done()
		d.keepQueuedAlive()
	}()
	n.log.Info("remote: serving durable stage", "stage", st.Name())
	return nil
}

func (d *durableReplica) stop() {
	d.once.Do(func() {
		close(d.stopC)
		d.mu.Lock()
		adv := d.adv
		d.mu.Unlock()
		if adv != nil {
			_ = adv.Unsubscribe()
		}
	})
}

// pull fetches what the queue has room for until stopped.
func (d *durableReplica) pull(threshold int) {
	for {
		select {
		case <-d.stopC:
			return
		case <-d.n.ctx.Done():
			return
		default:
		}
		room := 64
		if threshold > 0 {
			room = min(room, threshold-d.st.Sink().Len())
		}
		if room <= 0 {
			select { // full: the handlers will make room
			case <-time.After(5 * time.Millisecond):
			case <-d.stopC:
				return
			}
			continue
		}
		msgs, err := d.sub.Fetch(room, nats.MaxWait(250*time.Millisecond))
		if err != nil && !errors.Is(err, nats.ErrTimeout) {
			if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrBadSubscription) {
				return
			}
			d.n.log.Debug("remote: durable fetch", "stage", d.name, "err", err)
			select {
			case <-time.After(100 * time.Millisecond):
			case <-d.stopC:
				return
			}
			continue
		}
		for _, m := range msgs {
			d.deliver(m)
		}
	}
}

// refuseVersion turns down a message of a wire version this replica
// does not speak: nak'd (a newer replica may take it), or on its last
// delivery moved to the dead letters with the error; counted and logged.
func (d *durableReplica) refuseVersion(m *nats.Msg, err error) {
	d.n.refusedVersion(d.name, &d.versionRefused, err)
	if d.lastDelivery(m) {
		d.deadLetter(m, err)
		return
	}
	d.nak(m)
}

// nak gives m back to the stream for redelivery after the configured
// delay, counted.
func (d *durableReplica) nak(m *nats.Msg) {
	d.naked.Add(1)
	_ = m.NakWithDelay(d.rc.NakDelay)
}

// forgetLocked drops dl from the events pending and the deliveries in
// service (it will not be acknowledged by its events). The caller holds
// d.mu.
func (d *durableReplica) forgetLocked(dl *delivery) {
	for _, k := range dl.keys {
		d.dropLocked(k, dl)
	}
	delete(d.inService, dl)
}

// deliver hands one stream message to the stage.
func (d *durableReplica) deliver(m *nats.Msg) {
	if md, err := m.Metadata(); err == nil && md.NumDelivered > 1 {
		d.redelivered.Add(1)
	}
	if _, err := streamVersion(m.Header); err != nil {
		if _, newer := errors.AsType[*VersionError](err); newer {
			d.refuseVersion(m, err)
			return
		}
		// A malformed header: no replica will ever read it, a dead
		// letter at once.
		d.deadLetter(m, fmt.Errorf("cannot be decoded: %w", err))
		return
	}
	es, err := d.n.wire.decodeEvents(&reader{b: m.Data})
	if err != nil {
		// It never will be: a dead letter at once.
		d.deadLetter(m, fmt.Errorf("cannot be decoded: %w", err))
		return
	}
	extractTraces(m.Header, es)
	dl := &delivery{msg: m, left: len(es), admitted: time.Now()}
	d.mu.Lock()
	for _, e := range es {
		if k, ok := key(e); ok {
			d.pending[k] = append(d.pending[k], dl)
			dl.keys = append(dl.keys, k)
		} else {
			dl.left-- // not trackable: acknowledged once admitted
		}
	}
	dl.queued = len(dl.keys)
	if len(dl.keys) > 0 {
		d.inService[dl] = struct{}{}
	}
	d.mu.Unlock()
	if len(es) == 1 {
		err = d.st.Sink().Enqueue(es[0])
	} else {
		err = d.st.Sink().EnqueueMany(es)
	}
	if err != nil {
		d.mu.Lock()
		d.forgetLocked(dl)
		d.mu.Unlock()
		if d.lastDelivery(m) {
			d.deadLetter(m, err)
			return
		}
		d.nak(m)
		return
	}
	if len(dl.keys) == 0 {
		d.settle(dl) // never in inService
	}
}

func (d *durableReplica) dropLocked(k any, dl *delivery) {
	list := d.pending[k]
	for i, x := range list {
		if x == dl {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(d.pending, k)
	} else {
		d.pending[k] = list
	}
}

// key returns the identity an event is tracked by: a pointer's address,
// a comparable value itself.
func key(e any) (any, bool) {
	if e == nil {
		return nil, false
	}
	ok := false
	switch t := reflect.TypeOf(e); t.Kind() {
	case reflect.Struct, reflect.Array:
		// Value.Comparable also looks inside interfaces: a value holding
		// a slice in an interface field would panic as a map key. (It
		// allocates: the other kinds are decided by their type alone.)
		ok = reflect.ValueOf(e).Comparable()
	default:
		ok = t.Comparable()
	}
	if !ok {
		return nil, false
	}
	return e, true
}

// eventKeys returns the keys of batch's events (see key), nil for an
// event that is not trackable.
func eventKeys(batch []sink.Event) []any {
	keys := make([]any, len(batch))
	for i, e := range batch {
		keys[i], _ = key(e)
	}
	return keys
}

// complete records that the handler finished the events of a batch (by
// their keys, eventKeys): each with err if failed is nil, else those in
// failed (by index) with their error and the others well. A delivery
// whose last event is finished leaves inService and is settled.
func (d *durableReplica) complete(keys []any, err error, failed map[int]error) {
	var doneBuf [16]*delivery
	done, found := doneBuf[:0], false
	d.mu.Lock()
	for i, k := range keys {
		if k == nil {
			continue // not trackable
		}
		list := d.pending[k]
		if len(list) == 0 {
			continue
		}
		found = true
		dl := list[0]
		d.dropLocked(k, dl)
		dl.left--
		eventErr := err
		if failed != nil {
			eventErr = failed[i]
		}
		if eventErr != nil {
			dl.err = eventErr
		}
		if dl.left <= 0 {
			// out of inService under d.mu: no renewal follows its settling
			delete(d.inService, dl)
			done = append(done, dl)
		}
	}
	d.mu.Unlock()
	if found {
		d.lastProgress.Store(time.Now().UnixNano())
	}
	for _, dl := range done {
		d.settle(dl)
	}
}

// starting records that the events of a batch (by their keys,
// eventKeys) enter a handler: each is counted off the first delivery
// holding it with events still queued (with equal event values in
// several deliveries that may be another's than the one it came in: at
// worst that one is renewed one wait less); a delivery whose last queued
// event enters a handler is started.
func (d *durableReplica) starting(keys []any) {
	now := time.Now()
	d.lastProgress.Store(now.UnixNano())
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		if k == nil {
			continue
		}
		for _, dl := range d.pending[k] {
			if dl.queued > 0 {
				if dl.queued--; dl.queued == 0 {
					dl.started = now
				}
				break
			}
		}
	}
}

// queuedRenewLimit is how long a delivery whose events all still wait in
// the queue is renewed at most: ten acknowledgement waits, or, if the
// stage expires queued events (queue.max_time), one wait past that.
func queuedRenewLimit(wait, maxTime time.Duration) time.Duration {
	if maxTime > 0 {
		return min(10*wait, maxTime+wait)
	}
	return 10 * wait
}

// keepQueuedAlive renews, four times per acknowledgement wait
// (remote.timeout), the wait of every delivery with events still queued
// here, or whose last event entered a handler less than one wait ago —
// as long as an event entered or left a handler of the stage within the
// last wait. So a replica that is slow but working keeps what it pulled
// instead of having it redelivered (handled twice) while it is still
// queued; a replica that is stopped, cut off or stuck (no event in or out
// of a handler for a whole wait) renews nothing and its deliveries go to
// another replica; an event whose handler runs past its wait is
// redelivered as before (up to two waits after it started, the last
// renewal counting). A delivery with an event still not in a handler
// after queuedLimit (the stage dropped it, or its queue is that slow) is
// given back: nak'd, so that it is redelivered (its events that were
// handled are handled again there).
func (d *durableReplica) keepQueuedAlive() {
	wait := d.rc.Timeout
	if wait <= 0 {
		return
	}
	tick := time.NewTicker(max(wait/4, time.Millisecond))
	defer tick.Stop()
	var giveBack []*nats.Msg
	for {
		// Not stopped by Shutdown (d.stopC), which only stops the pulls:
		// while the stage drains what it holds, its deliveries stay
		// renewed, until Close.
		select {
		case <-d.n.ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		progressing := now.Sub(time.Unix(0, d.lastProgress.Load())) < wait
		giveBack = giveBack[:0]
		// Under d.mu: complete removes a delivery from inService under
		// it before settling it (acknowledging or nak'ing it), so no
		// renewal follows those.
		d.mu.Lock()
		for dl := range d.inService {
			switch {
			case dl.queued > 0 && now.Sub(dl.admitted) >= d.queuedLimit:
				d.forgetLocked(dl)
				giveBack = append(giveBack, dl.msg)
			case progressing && (dl.queued > 0 || now.Sub(dl.started) < wait):
				if dl.msg.InProgress() == nil {
					d.inProgress.Add(1)
				}
			}
		}
		d.mu.Unlock()
		for _, m := range giveBack {
			d.givenBack.Add(1)
			d.nak(m)
		}
	}
}

// settle acknowledges dl, every event of which was handled well, or
// else naks it (on its last delivery moves it to the dead letters with
// its error). dl is not in inService (complete took it out, or it never
// was).
func (d *durableReplica) settle(dl *delivery) {
	if dl.err != nil {
		if d.lastDelivery(dl.msg) {
			d.deadLetter(dl.msg, dl.err)
			return
		}
		d.nak(dl.msg)
		return
	}
	d.acked.Add(1)
	_ = dl.msg.Ack()
}

// ---- the acknowledging handler ----

// acking wraps a durable stage's handler: after each batch it reports
// which events succeeded. The optional interfaces of the handler are
// forwarded here, in one place.
type acking struct {
	h stage.Handler
	d *durableReplica
}

type ackingSingle struct{ *acking }

func (ackingSingle) SingleThreaded() {}

func wrapAcking(h stage.Handler, d *durableReplica) stage.Handler {
	a := &acking{h: h, d: d}
	if _, ok := h.(stage.SingleThreaded); ok {
		return ackingSingle{a}
	}
	return a
}

func (a *acking) Init(c *stage.Context) error {
	if in, ok := a.h.(stage.Initializer); ok {
		return in.Init(c)
	}
	return nil
}

func (a *acking) Destroy() error {
	if d, ok := a.h.(stage.Destroyer); ok {
		return d.Destroy()
	}
	return nil
}

// Unwrap returns the wrapped handler.
func (a *acking) Unwrap() stage.Handler { return a.h }

func (a *acking) HandleEvents(batch []sink.Event) (err error) {
	keys := eventKeys(batch) // before the handler, which may reuse batch
	a.d.starting(keys)
	defer func() {
		if r := recover(); r != nil {
			a.report(keys, fmt.Errorf("handler panicked: %v", r), false)
			panic(r) // the runtime contains it
		}
		a.report(keys, err, true)
	}()
	return a.h.HandleEvents(batch)
}

// report acks or naks the batch's events (by their keys) after the
// handler returned err (or panicked: returned false).
func (a *acking) report(keys []any, err error, returned bool) {
	var failed map[int]error
	whole := !returned
	if err != nil && returned {
		failed = map[int]error{}
		var walk func(error) bool
		walk = func(err error) bool {
			if ee, ok := err.(*stage.EventError); ok && ee.Index >= 0 && ee.Index < len(keys) {
				failed[ee.Index] = ee.Err
				if ee.Err == nil {
					failed[ee.Index] = ee
				}
				return true
			}
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				for _, x := range j.Unwrap() {
					if !walk(x) {
						return false
					}
				}
				return true
			}
			return false
		}
		whole = !walk(err)
	}
	if whole {
		failed = nil // err is every event's
	}
	a.d.complete(keys, err, failed)
}

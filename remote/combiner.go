package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandstorm-go/sandstorm/sink"
)

// maxCombined bounds the Enqueues and EnqueueManys one combined request
// carries (and maxCombinedBytes, or half the server's maximum payload,
// their encoded events, unless the first caller's alone is larger); a
// round that reaches either is full. maxInFlight bounds a combiner's
// requests waiting for their verdicts (see combiner).
const (
	maxCombined      = 256
	maxCombinedBytes = 256 << 10
	maxInFlight      = 4
)

// combiner sends the Enqueues and EnqueueManys of concurrent goroutines
// together: a goroutine that finds no leader at work (no request in
// flight, no leader waiting for its callers to come back) sends its
// events by itself, at once; the others gather in rounds, in the order they
// come, each round as many as one request carries (maxCombined, and
// their encoded events within the limit), and each round is sent as one
// request (opEach: the replica decides each group on its own, all or
// nothing, so each caller still gets its own verdict) by its first
// caller, its head. The other callers of a round sleep on the round's
// done channel, closed once every one of them has its verdict: one
// wake-up for the round, not one send per caller.
//
// When a round is sent: a round that is not full once the request
// before is answered and its leader is done (see lead), as with one
// request in flight at a time; a full round at once, even while earlier
// requests wait for their verdicts, as long as fewer than maxInFlight
// do. Up to maxCombined callers with small events this is one request
// in flight (a round cannot fill while its leader is out of it); more
// callers, or large events that fill a round by bytes, send full
// requests side by side. The bound is per combiner: per destination
// (each home, and any replica). Requests in
// flight together may be admitted in any order (on one replica in the
// order sent; they may go to different replicas); they carry events of
// different callers, since each caller waits for its verdict.
//
// Larger requests beat more requests in flight, hence a round is full
// only at 256 callers (measured on a shared 2-core machine, see
// docs/cluster.md, Throughput): 64 callers with one request in flight
// against two (2026-11-24: 1.1-1.5x a plain publisher with one, 0.4-0.8x
// with two; 2026-11-27, two or four in flight once 8-32 events wait, or
// two leaders each taking half the callers: 560-660k events/s against
// 790-950k with one); 256 callers in requests of 255 events against
// four of 64 in flight (2026-11-27, seventh pass: 0.83-1.10M events/s at
// 0.91-1.25 µs CPU each against 0.69-0.91M at 1.09-1.97 µs). Full rounds
// side by side pay from 1,024 callers: 0.81-0.94M events/s against
// 0.64-0.73M with one in flight.
//
// One close of done, not a wake-up per caller (2026-11-27, ninth pass):
// callers sleeping each on its own channel, woken one after another by
// the caller before them or all by the leader, cost the same per Enqueue
// alone (BenchmarkCombiner) and no less in a round trip over NATS
// (555-622k events/s, all three), the chain with twice the context
// switches. What a caller costs here is the scheduler's parking and
// readying, within ~0.1 µs of BenchmarkCombiner's floor.
type combiner struct {
	home    string // the instance its requests go to (Codecs.SetHome), or ""
	mu      sync.Mutex
	rounds  []*round // waiting to be sent, in order; the first woken have their heads woken
	woken   int      // rounds whose heads were woken to send them and have not taken them out yet
	waiting int      // the callers of rounds
	// leaders counts the rounds woken or sent whose leader is not done
	// (lead), inFlight those of them without their verdict yet.
	leaders  int
	inFlight int
	limit    int // the encoded bytes of a round (batchSender.combinedLimit, refreshed by each leader; 0: not known yet)
	// A home's combiner: joins counts its callers; the sweep's
	// pruneHomes notes idleJoins, that count when it found c idle since
	// idleSince, and sets retired when it forgets c.
	joins, idleJoins uint64
	idleSince        time.Time
	retired          bool
}

// round is the callers of one combined request, in the order they came:
// callers[0], its head, leads it; the others sleep on done.
type round struct {
	callers []*pending
	size    int           // their encoded events' bytes
	done    chan struct{} // closed once every caller has its verdict

	// The leader's wait for the callers it answered (see lead): away
	// counts the callers answered that have not returned yet; the last
	// to return wakes the leader on resume (made with the round, never
	// replaced; buffered: a wake-up sent before the leader sleeps is not
	// lost, and one too many, even one sent after the round was reused,
	// only makes a leader look again).
	away   atomic.Int64
	resume chan struct{}
}

var roundPool = sync.Pool{New: func() any { return &round{resume: make(chan struct{}, 1)} }}

// batchSender sends a combiner's requests: the stage's sender (a test's
// fake in unit tests).
type batchSender interface {
	// sendEach sends batch as one request (to c.home's replica, if not
	// "") and sets every caller's err to its own verdict.
	sendEach(c *combiner, batch []*pending)
	// combinedLimit bounds the encoded events of one request.
	combinedLimit() int
}

// combinedLimit is maxCombinedBytes, or half the server's maximum payload
// if that is less.
func (s *stageSender) combinedLimit() int {
	return min(maxCombinedBytes, int(s.n.nc.MaxPayload()/2))
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
	wake  chan struct{} // a round's head: lead it now
	// away: counted in its round's away until the caller returns (it was
	// answered by its round's head). Derivable (every caller but the
	// head, once the round is answered), but the one record of it a
	// batchSender sees: TestCombinerWaitsForAnsweredCallers checks
	// through it that no request goes before the callers of the one
	// before have returned (the round's count is not within its reach).
	away bool
}

var pendingPool = sync.Pool{New: func() any { return &pending{wake: make(chan struct{}, 1)} }}

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
	p.event, p.events, p.codec, p.enc, p.err, p.trace = e, nil, cd, enc, nil, tracedPending(e)
	home := ""
	if cd.Home != nil {
		home = cd.Home(e)
	}
	return s.enqueueTo(s, home, p)
}

// errRetired is enqueue's refusal of a caller by a home's combiner the
// sweep retired (see pruneHomes): the caller takes the home's new one.
var errRetired = errors.New("remote: combiner retired")

// enqueue sends p's event with the others waiting in c and returns its
// verdict, or errRetired (p untouched) if c was retired.
func (c *combiner) enqueue(s batchSender, p *pending) error {
	c.mu.Lock()
	if c.retired {
		c.mu.Unlock()
		return errRetired
	}
	c.joins++
	if c.limit == 0 {
		c.limit = s.combinedLimit()
	}
	r, head := c.join(p)
	heads, n := c.launch()
	c.mu.Unlock()
	lead := false // p's round is to be sent now: p is among the heads launched
	if n > 0 {
		lead = slices.Contains(heads[:n], p)
		wakeHeads(slices.DeleteFunc(heads[:n], func(h *pending) bool { return h == p }))
	}
	switch {
	case lead:
		c.lead(s, r)
	case head:
		<-p.wake
		c.lead(s, r)
	default:
		<-r.done
	}
	if p.away {
		p.away = false
		if r.away.Add(-1) == 0 {
			wake(r.resume)
		}
	}
	err := p.err
	p.err, p.event, p.events, p.codec = nil, nil, nil, nil
	if cap(p.enc) > 4096 {
		p.enc = nil
	}
	pendingPool.Put(p)
	return err
}

// join adds p to the last round waiting if it has room for p's events,
// else to a new round it heads (head), and returns the round. The caller
// holds c.mu.
func (c *combiner) join(p *pending) (r *round, head bool) {
	if n := len(c.rounds); n > 0 {
		r = c.rounds[n-1]
		if len(r.callers) < maxCombined && r.size+len(p.enc) <= c.limit {
			r.callers = append(r.callers, p)
			r.size += len(p.enc)
			c.waiting++
			return r, false
		}
	}
	r = roundPool.Get().(*round)
	r.callers, r.size, r.done = append(r.callers, p), len(p.enc), make(chan struct{})
	c.rounds = append(c.rounds, r)
	c.waiting++
	return r, true
}

// launch marks the rounds to send now as woken and returns their heads
// (n of them), for the caller to wake once it has let go of c.mu (which
// it holds): in order, the first round not woken if no leader is at
// work, and then every full one (every round but the last is: the next
// caller did not fit) while fewer than maxInFlight requests wait for
// their verdicts.
func (c *combiner) launch() (heads [maxInFlight]*pending, n int) {
	for c.woken < len(c.rounds) && c.inFlight < maxInFlight {
		r := c.rounds[c.woken]
		full := c.woken < len(c.rounds)-1 || len(r.callers) >= maxCombined
		if c.leaders > 0 && !full {
			break
		}
		c.woken++
		c.leaders++
		c.inFlight++
		heads[n] = r.callers[0]
		n++
	}
	return heads, n
}

// lead sends round r, woken, wakes its callers with their verdicts,
// then sends the rounds that may go now (see launch).
//
// The callers just answered are running again and most will enqueue at
// once: the leader lets them, so that the next request carries them all
// rather than the first alone (a request of one, then one of the rest, a
// round trip each). It sleeps until every caller it answered (itself
// aside) has returned, woken by the last; then, while fewer wait than
// were waiting when the verdict came plus those it answered, it yields
// while more arrive. The last caller to return readies the leader on its
// own processor, where it runs once that caller has enqueued again.
// Sleeping, not yielding, while they return leaves both processors to
// them: a leader that yields in a loop is picked up again at once by the
// other processor while the callers queue behind the one running, finds
// no new arrival and sends before they are back: the callers then split
// into two groups, each a request of its own (measured: 50-52 events a
// request from 64 callers, against 63.7 sleeping). A full round does not
// wait for it: the leader counts as a request in flight only until its
// verdict is in.
func (c *combiner) lead(s batchSender, r *round) {
	limit := s.combinedLimit()
	c.mu.Lock()
	i := slices.Index(c.rounds, r)
	c.rounds = slices.Delete(c.rounds, i, i+1)
	c.woken--
	c.waiting -= len(r.callers)
	c.limit = limit
	c.mu.Unlock()
	batch, self := r.callers, r.callers[0]
	for rest := batch; len(rest) > 0; {
		// One request, unless the server's maximum payload shrank (a
		// reconnect) since r's callers joined it under the old limit.
		n := fitting(rest, limit)
		s.sendEach(c, rest[:n])
		rest = rest[n:]
	}
	target := c.verdictIn(r, self)
	close(r.done)
	if len(batch) > 1 {
		c.awaitReturn(r, target)
	}
	// Every caller of r has returned (or is self): r is no one's now.
	clear(r.callers)
	r.callers, r.done = r.callers[:0], nil
	roundPool.Put(r)
	c.mu.Lock()
	c.leaders--
	heads, n := c.launch()
	c.mu.Unlock()
	wakeHeads(heads[:n])
}

// fitting is how many callers from the start of batch fit in a request
// of limit encoded bytes: at least one (a caller too large alone is sent
// alone, and the server's refusal is its verdict).
func fitting(batch []*pending, limit int) int {
	size := len(batch[0].enc)
	n := 1
	for n < len(batch) && size+len(batch[n].enc) <= limit {
		size += len(batch[n].enc)
		n++
	}
	return n
}

// wakeHeads wakes the heads of rounds to lead them.
func wakeHeads(heads []*pending) {
	for _, h := range heads {
		h.wake <- struct{}{}
	}
}

// verdictIn counts the callers of r but self as away, before they are
// woken, sends the full rounds the verdict leaves room for, and returns
// the target of awaitReturn: as many callers as wait now and as are
// answered.
func (c *combiner) verdictIn(r *round, self *pending) (target int) {
	answered := 0
	for _, p := range r.callers {
		if p != self {
			p.away = true
			answered++
		}
	}
	r.away.Add(int64(answered))
	c.mu.Lock()
	c.inFlight--
	target = c.waiting + answered
	heads, n := c.launch()
	c.mu.Unlock()
	wakeHeads(heads[:n])
	return target
}

// awaitReturn sleeps until every caller of r answered has returned, then
// yields while more arrive, until target wait (see lead).
func (c *combiner) awaitReturn(r *round, target int) {
	for r.away.Load() > 0 {
		<-r.resume
	}
	for waiting := -1; ; {
		c.mu.Lock()
		now := c.waiting
		c.mu.Unlock()
		if now >= target || now == waiting {
			return
		}
		waiting = now
		runtime.Gosched()
	}
}

// wake wakes the leader sleeping in awaitReturn on resume, if any.
func wake(resume chan struct{}) {
	select {
	case resume <- struct{}{}:
	default:
	}
}

// sendEach sends a combined request of c's (to c.home's replica, if not
// "") and sets every caller's err to its own verdict.
func (s *stageSender) sendEach(c *combiner, batch []*pending) {
	home := c.home
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
	counted := 0 // refusals of the whole request counted already (roundTrip's, reject's: one)
	if err != nil {
		counted = 1
	}
	if err == nil && v.status != statusEach {
		err = v.err() // the whole request failed (it could not be decoded)
		if err == nil {
			err, counted = s.reject("bad verdict"), 1
		}
	}
	if err == nil && len(v.each) != len(batch) {
		err, counted = s.reject(fmt.Sprintf("verdict for %d groups of events, sent %d", len(v.each), len(batch))), 1
	}
	if err != nil {
		// every caller is refused, and counted, as if each had sent alone
		s.rejected.Add(uint64(len(batch) - counted))
	}
	why, admitted, refused := 0, 0, 0
	for i, p := range batch {
		switch {
		case err != nil:
			p.err = err
		case v.each[i] == statusOK:
			admitted += p.size()
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
			refused++
		}
	}
	// counted once for the request (its callers are woken after this)
	if admitted > 0 {
		s.events.Add(uint64(admitted))
	}
	if refused > 0 {
		s.rejected.Add(uint64(refused))
	}
}

// size is how many events p carries.
func (p *pending) size() int {
	if p.events == nil {
		return 1
	}
	return len(p.events)
}

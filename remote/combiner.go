package remote

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/sandstorm-go/sandstorm/sink"
)

// maxCombined bounds the Enqueues and EnqueueManys one combined request
// carries (and maxCombinedBytes, or half the server's maximum payload,
// their encoded events, unless the first caller's alone is larger),
// and maxLeaders the combined requests in flight at once. One request in
// flight per sink measured best (2026-11-24, shared 2-core machine: 1.1-1.5x
// a plain publisher with one, 0.4-0.8x with two: smaller batches; again
// 2026-11-27 with two or four in flight once 8-32 events wait, and with
// two leaders each sleeping for its own callers, each taking half of
// them: 35 events a request, 560-660k events/s against 790-950k with
// one: see docs/cluster.md, Throughput).
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

	// The leader's wait for the callers it answered (see lead): away
	// counts the callers answered that have not returned yet; the last
	// to return wakes the leader on resume (set under mu; buffered: a
	// wake-up sent before the leader sleeps is not lost, and one too
	// many only makes it look again).
	away   atomic.Int64
	resume chan struct{}
	target int // under mu: set by verdictIn, see lead
}

// batchSender sends a combiner's requests: the stage's sender (a test's
// fake in unit tests).
type batchSender interface {
	// sendEach sends batch as one request (to c.home's replica, if not
	// ""), calls c.verdictIn(batch, self) once the verdict is in
	// (self: the leader's own caller), then wakes every caller of batch
	// with its own verdict.
	sendEach(c *combiner, batch []*pending, self *pending)
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
	wake  chan bool // true: lead the next request; false: err is set
	asked bool      // under combiner.mu: already asked to lead
	// away: counted in combiner.away until the caller returns (it was
	// answered by a leader other than itself)
	away bool
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
func (c *combiner) enqueue(s batchSender, p *pending) error {
	c.mu.Lock()
	c.waiting = append(c.waiting, p)
	lead := c.leaders < maxLeaders
	if lead {
		c.leaders++
	}
	c.mu.Unlock()
	if lead {
		c.lead(s, p)
	}
	for <-p.wake {
		c.lead(s, p)
	}
	if p.away {
		p.away = false
		if c.away.Add(-1) == 0 {
			c.mu.Lock()
			resume := c.resume
			c.mu.Unlock()
			wake(resume)
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

// lead sends what is waiting, then hands the lead to the next waiter (or
// gives it up).
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
// request from 64 callers, against 63.7 sleeping).
func (c *combiner) lead(s batchSender, self *pending) {
	batch := c.take(s.combinedLimit())
	n := len(batch)
	if n > 0 {
		s.sendEach(c, batch, self)
	}
	if n > 1 {
		c.mu.Lock()
		target := c.target
		c.mu.Unlock()
		c.awaitReturn(target)
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

// verdictIn counts the callers of batch but self as away, before they
// are woken, and sets the target of awaitReturn: as many callers as wait
// now and as are answered.
func (c *combiner) verdictIn(batch []*pending, self *pending) {
	answered := 0
	for _, p := range batch {
		if p != self {
			p.away = true
			answered++
		}
	}
	c.mu.Lock()
	if c.resume == nil {
		c.resume = make(chan struct{}, 1)
	}
	c.target = len(c.waiting) + answered
	c.mu.Unlock()
	c.away.Add(int64(answered))
}

// awaitReturn sleeps until every caller answered has returned, then
// yields while more arrive, until target wait (see lead).
func (c *combiner) awaitReturn(target int) {
	for c.away.Load() > 0 {
		<-c.resume
	}
	for waiting := -1; ; {
		c.mu.Lock()
		now := len(c.waiting)
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
	if resume != nil {
		select {
		case resume <- struct{}{}:
		default:
		}
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

// sendEach sends a combined request of c's (to c.home's replica, if not
// "") and wakes every waiter with its own verdict, once c.verdictIn has
// counted them (self: the leader's own caller).
func (s *stageSender) sendEach(c *combiner, batch []*pending, self *pending) {
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
	if err == nil && v.status != statusEach {
		err = v.err() // the whole request failed (it could not be decoded)
		if err == nil {
			err = s.reject("bad verdict")
		}
	}
	if err == nil && len(v.each) != len(batch) {
		err = s.reject(fmt.Sprintf("verdict for %d groups of events, sent %d", len(v.each), len(batch)))
	}
	c.verdictIn(batch, self)
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

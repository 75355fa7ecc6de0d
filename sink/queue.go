package sink

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
)

// epoch anchors Nanotime's monotonic readings.
var epoch = time.Now()

// Nanotime is a monotonic timestamp in nanoseconds (always > 0), used to
// stamp events as they enter a queue.
func Nanotime() int64 { return int64(time.Since(epoch)) + 1 }

// Stats are a queue's cumulative counters.
type Stats struct {
	Enqueued          uint64 // events accepted (committed transactions included)
	RejectedFull      uint64 // events refused because the queue was full
	RejectedPredicate uint64 // events refused by the predicate
	RejectedClosed    uint64 // events refused because the queue was closed
	Dropped           uint64 // events refused on EnqueueLossy (also counted above)
	Dequeued          uint64 // events handed to the runtime
	Batches           uint64 // Dequeue calls that handed out events
	Finished          uint64 // dequeued events whose handling is over (see Finish)
	Removed           uint64 // events taken out unhandled (RemoveIf, Discard)
}

type entry struct {
	ev    Event
	stamp int64
}

// stampSample: without a Completer predicate, one event in this many is
// stamped on entry (reading the clock costs ~30 ns), enough for the
// sampled queueing-time metrics. Unstamped events carry stamp 0.
const stampSample = 64

// Queue is a bounded multi-producer/multi-consumer FIFO event queue with
// admission control. The zero value is not usable: call NewQueue.
// SetScheduler replaces FIFO order by another (LIFO, priority, stride,
// shortest first, keyed).
//
// Producers use the Sink methods. A consumer takes events off with
// Dequeue and waits for work on Ready; for a stage's queue that consumer
// is the runtime, which also has operations of its own
// (internal/sinkrt).
type Queue struct {
	name string
	// capacity is the bound (<= 0: unbounded). SetCapacity changes it
	// under mu; it is atomic for the readers that take no lock
	// (Capacity, Backlogged).
	capacity atomic.Int64

	mu       sync.Mutex
	ring     []entry
	head     int
	count    int
	reserved int
	closed   bool
	// stampAll: every event is stamped (sinkrt.Queue.StampAll).
	stampAll bool
	// abandoned: Discard ran on the closed queue; the runtime has given
	// up on it, and transactions committed later are removed at once.
	abandoned bool
	pushes    uint32 // Enqueue calls, for sampled stamps
	lastStamp int64  // the latest stamp given, for predicate boundaries
	// enqueued and dequeued are counted under mu (the lock is held
	// anyway; an atomic add would cost another locked instruction).
	enqueued, dequeued, batches uint64

	length atomic.Int64
	// adm holds the predicate. Installs happen under mu, so that entry
	// stamps order events against predicate replacements: an event
	// stamped before an install was admitted by an older predicate
	// (admBox.since), and its completion goes there.
	adm  Admission
	full *RejectError
	shut *ClosedError

	isClosed atomic.Bool
	ready    chan struct{} // token: events may be available
	// waiters are consumers parked in park, most recent last. An event
	// enqueued while the queue is empty goes straight to one of them.
	// Their number is read under the lock only: an atomic copy for
	// lock-free readers cost every hop two more locked instructions.
	waiters []*sinkrt.Waiter
	// backlog, when armed (NotifyBacklog), gets a token once an event
	// queued rather than handed to a parked consumer makes backlogAt.
	backlog   chan struct{}
	backlogAt int
	space     chan struct{} // token: room may be available
	spaceWait atomic.Int32
	done      chan struct{} // closed by Close

	// Scheduling (sched.go). slow is set while a scheduler is installed or
	// the queue is paused; Dequeue then leaves the FIFO fast path.
	sched    Scheduler
	release  Releaser
	pauses   int
	slow     bool
	slowFlag atomic.Bool  // slow, readable without the lock
	runnable atomic.Int64 // what Dequeue could hand out, when slow

	rejectedFull, rejectedClosed, dropped, removed atomic.Uint64
	// finished counts dequeued events whose handling is over (Finish):
	// dequeued − finished are in service.
	finished atomic.Uint64
	age      ageLimit // max_time (age.go)
}

var _ Sink = (*Queue)(nil)

// NewQueue returns an empty queue holding at most capacity events;
// capacity <= 0 means unbounded.
func NewQueue(capacity int) *Queue {
	return NewNamedQueue("", capacity)
}

// NewNamedQueue is NewQueue with a name used in errors and metrics.
func NewNamedQueue(name string, capacity int) *Queue {
	initial := 16
	if capacity > 0 && capacity < initial {
		initial = capacity
	}
	q := &Queue{
		name:  name,
		ring:  make([]entry, initial),
		full:  &RejectError{Sink: name, Reason: "queue full"},
		shut:  &ClosedError{Sink: name},
		ready: make(chan struct{}, 1),
		space: make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	q.capacity.Store(int64(capacity))
	return q
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// Capacity returns the bound given to NewQueue or the last SetCapacity
// (<= 0: unbounded).
func (q *Queue) Capacity() int { return int(q.capacity.Load()) }

// SetCapacity changes the queue's bound while traffic flows (<= 0:
// unbounded), as a configuration reload does. Events already queued stay
// queued when the bound is lowered below their number: the queue refuses
// new ones until it has drained below the new bound. Raising the bound
// wakes producers waiting for room (EnqueueWait).
func (q *Queue) SetCapacity(capacity int) {
	q.mu.Lock()
	q.capacity.Store(int64(capacity))
	q.mu.Unlock()
	q.signalSpace()
}

// Len returns the number of events waiting (prepared, uncommitted events are
// not counted).
func (q *Queue) Len() int { return int(q.length.Load()) }

// SetPredicate installs p (nil: accept everything) while traffic flows. If
// p implements Binder, it is bound to q first. Events admitted by the
// predicate p replaces still complete on it (see completerAt). A
// predicate's Accept runs under the queue's lock and must not call
// SetPredicate on its own queue.
func (q *Queue) SetPredicate(p Predicate) {
	nb := newAdmBox(q, p)
	q.mu.Lock()
	defer q.mu.Unlock()
	if p == nil && q.adm.box.Load() == nil {
		return
	}
	// Every event stamped from now on has a stamp >= since, every event
	// stamped before has a smaller one.
	since := max(Nanotime(), q.lastStamp+1)
	q.lastStamp = since
	q.adm.mu.Lock()
	q.adm.installLocked(nb, since)
	q.adm.mu.Unlock()
}

// mayComplete reports whether completions may be owed to a predicate:
// the installed one, or one it replaced, is a Completer.
func (q *Queue) mayComplete() bool { return q.adm.mayComplete() }

// completerAt returns the Completer owed the completion of an event with
// entry stamp stamp (from Dequeue): the predicate installed when the event
// was admitted, if it is a Completer, else nil. Unstamped events (stamp 0)
// were admitted while no Completer was installed.
func (q *Queue) completerAt(stamp int64) Completer {
	return q.adm.at(stamp).completer()
}

// cancelAt gives e back to the predicate that admitted it (stamp as in
// completerAt).
func (q *Queue) cancelAt(e Event, stamp int64) {
	Ticket{q.adm.at(stamp)}.Cancel(e)
}

// Predicate returns the installed predicate or nil.
func (q *Queue) Predicate() Predicate { return q.adm.Predicate() }

// decideLocked decides one event as Enqueue does: refused if the queue
// is closed, then if it is full (unless e is non-rejectable), then by the
// installed predicate (q.adm.Admit, written out: no call while no
// predicate is installed), each refusal counted. It returns the installed
// predicate's box, which stamps an admitted event. The caller holds q.mu.
func (q *Queue) decideLocked(e Event) (*admBox, error) {
	if q.closed {
		q.rejectedClosed.Add(1)
		return nil, q.shut
	}
	if c := int(q.capacity.Load()); c > 0 && q.count+q.reserved >= c && !IsNonRejectable(e) {
		q.rejectedFull.Add(1)
		return nil, q.full
	}
	b := q.adm.box.Load()
	if b != nil && b.p != nil && !b.p.Accept(e) {
		q.adm.rejected.Add(1)
		return nil, b.err
	}
	return b, nil
}

// Enqueue adds e to the tail of the queue.
//
// Its checks are decideLocked's and its end after a push unlockPushed's,
// written out: with the two calls the default 10-stage pipeline ran at
// 1.81–2.32× a channel pipeline, under the 2× budget in 4 of 9 rounds;
// written out, at 2.27–2.50× (docs/benchmarks.md, 27 Nov, 20:11 UTC).
// Keep them in step.
func (q *Queue) Enqueue(e Event) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		q.rejectedClosed.Add(1)
		return q.shut
	}
	if c := int(q.capacity.Load()); c > 0 && q.count+q.reserved >= c && !IsNonRejectable(e) {
		q.mu.Unlock()
		q.rejectedFull.Add(1)
		return q.full
	}
	b := q.adm.box.Load()
	if b != nil && b.p != nil && !b.p.Accept(e) {
		q.mu.Unlock()
		q.adm.rejected.Add(1)
		return b.err
	}
	q.enqueued++
	if n := len(q.waiters); n > 0 && q.count == 0 && !q.slow {
		// Hand-off: the queue is empty and a consumer is parked; the
		// event goes to it directly, as a channel send to a waiting
		// receiver does, and never touches the ring.
		w := q.waiters[n-1]
		q.waiters[n-1] = nil
		q.waiters = q.waiters[:n-1]
		q.dequeued++
		q.batches++
		stamp := q.stampLocked(b)
		q.mu.Unlock()
		w.C <- sinkrt.Handoff{Ev: e, Stamp: stamp, OK: true}
		return nil
	}
	q.push(e, q.stampLocked(b))
	w := q.popWaiterLocked()
	long := q.count > softBound && q.capacity.Load() <= 0
	q.mu.Unlock()
	q.wake(w)
	if long {
		runtime.Gosched()
	}
	return nil
}

// Backlogged reports whether the queue is unbounded and holds more than
// a few thousand events: EnqueueWait then waits for room as on a full
// bounded queue (see Backlogger), though Enqueue would accept.
func (q *Queue) Backlogged() bool {
	return q.capacity.Load() <= 0 && q.length.Load() > softBound
}

// softBound is the length past which an unbounded queue makes its
// producers yield their processor after each enqueue. An unbounded queue
// never refuses an event, but a producer that races ahead of the stages
// downstream fills every queue of a pipeline with events that leave the
// processor's caches before they are handled (a default-configured
// 10-stage pipeline ran at 0.2–0.5× a channel pipeline, against 2–4×
// with bounded queues). Yielding lets the consumers run, so the queues
// stay short and warm; the producer is slowed, never refused or blocked.
const softBound = 1024

// EnqueueLossy adds e if the queue accepts it; a refused event is counted as
// dropped.
func (q *Queue) EnqueueLossy(e Event) bool {
	if err := q.Enqueue(e); err != nil {
		q.dropped.Add(1)
		return false
	}
	return true
}

// EnqueueMany adds every event of es, or none.
func (q *Queue) EnqueueMany(es []Event) error {
	if len(es) == 0 {
		return nil
	}
	q.mu.Lock()
	if err := q.admitLocked(es); err != nil {
		q.mu.Unlock()
		return err
	}
	now := q.nowLocked()
	for _, e := range es {
		q.push(e, now)
	}
	q.enqueued += uint64(len(es))
	q.unlockPushed()
	return nil
}

// admitLocked checks closure, capacity and the predicate for es, all or
// nothing. The caller holds q.mu.
func (q *Queue) admitLocked(es []Event) error {
	n := len(es)
	if q.closed {
		q.rejectedClosed.Add(uint64(n))
		return q.shut
	}
	if c := int(q.capacity.Load()); c > 0 && q.count+q.reserved+n > c && !allNonRejectable(es) {
		q.rejectedFull.Add(uint64(n))
		return q.full
	}
	_, err := q.adm.AdmitMany(es)
	return err
}

// Prepare admits es and reserves room for them without making them visible.
// Commit the returned Txn to enqueue them, or Abort it to give the room back.
func (q *Queue) Prepare(es []Event) (Txn, error) {
	q.mu.Lock()
	if err := q.admitLocked(es); err != nil {
		q.mu.Unlock()
		return nil, err
	}
	q.reserved += len(es)
	t := &txn{q: q, events: append([]Event(nil), es...), box: q.adm.box.Load(), stamp: q.nowLocked()}
	q.mu.Unlock()
	return t, nil
}

// txn is a prepared transaction. box is the predicate that admitted its
// events and stamp a time of that admission: events committed after the
// predicate was replaced carry stamp, so that they still complete on it.
type txn struct {
	q      *Queue
	events []Event
	box    *admBox
	stamp  int64
	once   atomic.Bool
}

// cancel gives the transaction's events back to the predicate that
// admitted them.
func (t *txn) cancel() {
	for _, e := range t.events {
		Ticket{t.box}.Cancel(e)
	}
}

func (t *txn) Commit() {
	if !t.once.CompareAndSwap(false, true) {
		return
	}
	q := t.q
	q.mu.Lock()
	q.reserved -= len(t.events)
	if q.abandoned {
		// Nobody drains this queue any more: the events are removed
		// at once, like the ones Discard took, instead of vanishing.
		q.mu.Unlock()
		q.removed.Add(uint64(len(t.events)))
		t.cancel()
		return
	}
	now := t.stamp
	if q.adm.box.Load() == t.box {
		now = q.nowLocked()
	}
	for _, e := range t.events {
		q.push(e, now)
	}
	q.enqueued += uint64(len(t.events))
	q.mu.Unlock()
	q.signalReady()
}

func (t *txn) Abort() {
	if !t.once.CompareAndSwap(false, true) {
		return
	}
	q := t.q
	q.mu.Lock()
	q.reserved -= len(t.events)
	closed := q.closed
	q.mu.Unlock()
	t.cancel()
	q.signalSpace()
	if closed {
		q.signalReady() // a draining consumer may be waiting for reservations to settle
	}
}

// stampLocked returns the entry stamp for an event about to be pushed:
// Nanotime when the predicate b needs every event's queueing time or may
// get it back cancelled, or a scheduler is installed, or for one event in
// stampSample; 0 otherwise.
func (q *Queue) stampLocked(b *admBox) int64 {
	q.pushes++
	if b.stamped() || q.sched != nil || q.pushes%stampSample == 1 || q.age.on() || q.stampAll {
		return q.nowLocked()
	}
	return 0
}

// nowLocked is Nanotime, never below the latest stamp given: stamps order
// events against predicate replacements (admBox.since).
func (q *Queue) nowLocked() int64 {
	t := max(Nanotime(), q.lastStamp)
	q.lastStamp = t
	return t
}

// push appends under q.mu, growing an unbounded ring.
func (q *Queue) push(e Event, stamp int64) {
	if q.backlog != nil && q.count+1 >= q.backlogAt {
		q.rouseLocked()
	}
	if q.sched != nil {
		q.sched.Push(e, stamp)
		q.count++
		q.noteLocked()
		return
	}
	if q.count == len(q.ring) {
		grown := make([]entry, 2*len(q.ring))
		n := copy(grown, q.ring[q.head:])
		copy(grown[n:], q.ring[:q.head])
		q.ring, q.head = grown, 0
	}
	i := q.head + q.count
	if i >= len(q.ring) {
		i -= len(q.ring)
	}
	q.ring[i] = entry{ev: e, stamp: stamp}
	q.count++
	q.length.Store(int64(q.count))
}

// Dequeue moves up to len(dst) events from the head of the queue into dst,
// and their enqueue stamps (Nanotime) into stamps when stamps is not nil
// (it must then be at least as long as dst). An event's stamp is 0 when it
// was not stamped: every event is stamped while the predicate is a
// Completer or a scheduler is installed, otherwise one in a few (a sample
// for queueing-time metrics). It returns how many it moved and never
// waits.
func (q *Queue) Dequeue(dst []Event, stamps []int64) int {
	if q.length.Load() == 0 {
		return 0 // cheap look before taking the lock
	}
	q.mu.Lock()
	if q.slow {
		return q.dequeueSlow(dst, stamps)
	}
	n := min(len(dst), q.count)
	for i := 0; i < n; i++ {
		slot := &q.ring[q.head]
		dst[i] = slot.ev
		if stamps != nil {
			stamps[i] = slot.stamp
		}
		*slot = entry{}
		q.head++
		if q.head == len(q.ring) {
			q.head = 0
		}
	}
	q.count -= n
	if q.count == 0 {
		q.head = 0
	}
	q.length.Store(int64(q.count))
	if n > 0 {
		q.dequeued += uint64(n)
		q.batches++
	}
	more := q.count > 0
	var w *sinkrt.Waiter
	if more {
		w = q.popWaiterLocked() // pass the wake-up on to another consumer
	}
	q.mu.Unlock()
	if n > 0 {
		q.signalSpace()
	}
	if more {
		q.wake(w)
	}
	return n
}

// Finish tells the queue that the runtime is done with n events it took
// out with Dequeue (handled, failed or given up). For the runtime only.
func (q *Queue) finish(n int) { q.finished.Add(uint64(n)) }

// InService returns how many events were dequeued and not yet finished. An
// event is at every instant queued (Pending), in service, or finished.
func (q *Queue) inService() int {
	f := q.finished.Load() // first: it never passes the dequeued count read after it
	q.mu.Lock()
	d := q.dequeued
	q.mu.Unlock()
	return int(d - f)
}

// Ready returns a channel that receives a token when events may be waiting,
// for a consumer outside the runtime's thread managers (whose workers park
// on the queue and are woken first). A consumer that finds the queue empty
// waits on it (and on Done) before trying Dequeue again. A token may be
// spurious.
func (q *Queue) Ready() <-chan struct{} { return q.ready }

// runtimeQueue is the runtime's view of a Queue (internal/sinkrt): the
// operations thread managers need and producers must not have.
type runtimeQueue struct{ q *Queue }

func init() {
	sinkrt.Of = func(q any) sinkrt.Queue { return runtimeQueue{q.(*Queue)} }
}

func (r runtimeQueue) Park(w *sinkrt.Waiter) (Event, int64, bool) { return r.q.park(w) }
func (r runtimeQueue) Enlist(w *sinkrt.Waiter) bool               { return r.q.enlist(w) }
func (r runtimeQueue) WakeAll()                                   { r.q.wakeAll() }
func (r runtimeQueue) Signal()                                    { r.q.signalReady() }
func (r runtimeQueue) Parked() int                                { return r.q.parked() }
func (r runtimeQueue) ParkedLocked() int                          { return len(r.q.waiters) }
func (r runtimeQueue) NotifyBacklog(ch chan struct{}, below int) bool {
	return r.q.notifyBacklog(ch, below)
}
func (r runtimeQueue) MayComplete() bool { return r.q.mayComplete() }
func (r runtimeQueue) StampAll() {
	r.q.mu.Lock()
	r.q.stampAll = true
	r.q.mu.Unlock()
}

var _ sinkrt.BatchCompleter = (*admBox)(nil)

func (r runtimeQueue) CompleterAt(stamp int64) sinkrt.Completer {
	if c := r.q.completerAt(stamp); c != nil {
		return c
	}
	return nil
}
func (r runtimeQueue) Finish(n int)                        { r.q.finish(n) }
func (r runtimeQueue) Finished() uint64                    { return r.q.finished.Load() }
func (r runtimeQueue) InService() int                      { return r.q.inService() }
func (r runtimeQueue) InServiceLocked() int                { return int(r.q.dequeued - r.q.finished.Load()) }
func (r runtimeQueue) Pause()                              { r.q.pause() }
func (r runtimeQueue) Resume()                             { r.q.resume() }
func (r runtimeQueue) Paused() bool                        { return r.q.paused() }
func (r runtimeQueue) Runnable() int                       { return r.q.runnableNow() }
func (r runtimeQueue) Release(events []Event)              { r.q.releaseEvents(events) }
func (r runtimeQueue) RemoveIf(f func(Event) bool) []Event { return r.q.removeIf(f) }
func (r runtimeQueue) Sheds() bool                         { return r.q.sheds() }
func (r runtimeQueue) Expire(events []Event, stamps []int64, now int64) int {
	return r.q.expire(events, stamps, now)
}

// SetReady replaces the channel the queue signals; call it before use.
func (r runtimeQueue) SetReady(ch chan struct{}) { r.q.ready = ch }

// rouseLocked sends the armed backlog channel its token and disarms it.
// The caller holds q.mu.
func (q *Queue) rouseLocked() {
	select {
	case q.backlog <- struct{}{}:
	default:
	}
	q.backlog = nil
}

// notifyBacklog arms ch (see sinkrt.Queue.NotifyBacklog).
func (q *Queue) notifyBacklog(ch chan struct{}, below int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.count >= below {
		return false
	}
	q.backlog, q.backlogAt = ch, max(below, 1)
	return true
}

// parked returns the number of consumers parked now.
func (q *Queue) parked() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiters)
}

// signalReady wakes one consumer: a parked one (Park), else whoever waits
// on Ready. The caller must not hold q.mu.
func (q *Queue) signalReady() {
	q.mu.Lock()
	w := q.popWaiterLocked()
	q.mu.Unlock()
	q.wake(w)
}

// wake sends w a wake-up token, or puts one on the Ready channel when w is
// nil. A parked consumer takes that token before it parks again, so a
// wake-up that finds nobody parked is not lost.
func (q *Queue) wake(w *sinkrt.Waiter) {
	if w != nil {
		w.C <- sinkrt.Handoff{}
		return
	}
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// popWaiterLocked removes and returns the most recently parked consumer,
// or nil. The caller holds q.mu.
func (q *Queue) popWaiterLocked() *sinkrt.Waiter {
	n := len(q.waiters)
	if n == 0 {
		return nil
	}
	w := q.waiters[n-1]
	q.waiters[n-1] = nil
	q.waiters = q.waiters[:n-1]
	return w
}

// park waits until the queue may have work for the consumer w. It returns
// at once when events are runnable, when the queue is closed and drained
// (nothing queued, no prepared transaction left), or when a wake-up was signalled since the
// consumer's last look (signalReady, wakeAll, Close, Resume...). Otherwise
// it parks; an event enqueued on the empty queue while the consumer is
// parked is handed to it directly, as the result (ok true): it has been
// dequeued (counted in Stats.Dequeued) and must be finished like any
// other. With ok false the consumer should look again with Dequeue.
func (q *Queue) park(w *sinkrt.Waiter) (e Event, stamp int64, ok bool) {
	if !q.enlist(w) {
		return nil, 0, false
	}
	h := <-w.C
	return h.Ev, h.Stamp, h.OK
}

// enlist is park without the wait: it adds w to the parked consumers and
// reports true, after which the consumer must receive from w.C, or it
// reports false when the consumer should look again with Dequeue at once
// (the cases in which park returns at once).
func (q *Queue) enlist(w *sinkrt.Waiter) bool {
	q.mu.Lock()
	if q.runnableLocked() > 0 || (q.closed && q.count == 0 && q.reserved == 0) {
		q.mu.Unlock()
		return false
	}
	select {
	case <-q.ready:
		q.mu.Unlock()
		return false
	default:
	}
	q.waiters = append(q.waiters, w)
	q.mu.Unlock()
	return true
}

// wakeAll wakes every parked consumer and leaves a wake-up token for one
// that is about to park. The runtime uses it when consumers must look at
// their pool's state again (resizing, cancellation).
func (q *Queue) wakeAll() {
	q.mu.Lock()
	ws := q.waiters
	q.waiters = nil
	q.mu.Unlock()
	for _, w := range ws {
		w.C <- sinkrt.Handoff{}
	}
	q.wake(nil)
}

func (q *Queue) signalSpace() {
	if q.spaceWait.Load() == 0 {
		return
	}
	select {
	case q.space <- struct{}{}:
	default:
	}
}

// Close stops intake: later enqueues fail with ErrClosed. Events already
// queued (and prepared transactions still to commit) stay for the runtime to
// drain. Close is idempotent.
func (q *Queue) Close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	q.isClosed.Store(true)
	q.mu.Unlock()
	close(q.done)
	q.wakeAll()
}

// IsClosed reports whether Close has been called.
func (q *Queue) IsClosed() bool { return q.isClosed.Load() }

// Closed returns a channel closed by Close.
func (q *Queue) Closed() <-chan struct{} { return q.done }

// Drained reports whether the queue is closed, empty and holds no prepared
// transaction: nothing more will ever come out of it.
func (q *Queue) Drained() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed && q.count == 0 && q.reserved == 0
}

// Discard empties the queue and returns the events it held, so a caller that
// cannot process them can report them instead of losing them silently; the
// predicate gets them back as cancelled. On a closed queue it also
// abandons the queue: a prepared transaction committed afterwards is
// counted as removed and cancelled, since no consumer will come for it.
func (q *Queue) Discard() []Event {
	q.mu.Lock()
	q.abandoned = q.closed
	var out []Event
	var stamps []int64 // nil: the scheduler does not give them back
	if q.sched != nil {
		out = q.sched.RemoveIf(func(Event) bool { return true })
		q.count = 0
		q.noteLocked()
	} else {
		out = make([]Event, 0, q.count)
		stamps = make([]int64, 0, q.count)
		for q.count > 0 {
			out = append(out, q.ring[q.head].ev)
			stamps = append(stamps, q.ring[q.head].stamp)
			q.ring[q.head] = entry{}
			q.head = (q.head + 1) % len(q.ring)
			q.count--
		}
		q.head = 0
		q.length.Store(0)
	}
	q.mu.Unlock()
	q.removed.Add(uint64(len(out)))
	for i, e := range out {
		if stamps != nil {
			q.cancelAt(e, stamps[i])
		} else {
			Ticket{q.adm.box.Load()}.Cancel(e) // a scheduler's events: the installed predicate
		}
	}
	return out
}

// Stats returns the queue's counters.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	enqueued, dequeued, batches := q.enqueued, q.dequeued, q.batches
	q.mu.Unlock()
	return Stats{
		Enqueued:          enqueued,
		RejectedFull:      q.rejectedFull.Load(),
		RejectedPredicate: q.adm.Rejected(),
		RejectedClosed:    q.rejectedClosed.Load(),
		Dropped:           q.dropped.Load(),
		Dequeued:          dequeued,
		Batches:           batches,
		Finished:          q.finished.Load(),
		Removed:           q.removed.Load(),
	}
}

// Pending is the number of queued events plus those held by prepared,
// unsettled transactions.
func (q *Queue) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.count + q.reserved
}

// SpaceSignal registers a waiter for room in the queue: the returned channel
// receives a token when events leave the queue or a transaction is aborted.
// Call release when done waiting. See SpaceNotifier.
func (q *Queue) SpaceSignal() (ch <-chan struct{}, release func()) {
	q.spaceWait.Add(1)
	return q.space, func() { q.spaceWait.Add(-1) }
}

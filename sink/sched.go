package sink

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/sandstorm-go/sandstorm/internal/ring"
)

// Scheduler decides the order in which a Queue hands its events to the
// runtime (Whirlwind §III.E). A Queue without a scheduler is a FIFO ring
// (the fast path); SetScheduler installs one of the schedulers below.
//
// The queue calls every method with its lock held: implementations need no
// locking of their own, must not block, and must not call back into the
// queue. Capacity, admission and counting stay with the queue.
type Scheduler interface {
	// Push adds e, enqueued at stamp (Nanotime).
	Push(e Event, stamp int64)
	// Pop moves up to len(dst) events, in the order they should run, into
	// dst and their stamps into stamps (when stamps is not nil), and
	// returns how many it moved.
	Pop(dst []Event, stamps []int64) int
	// Len is the number of events held.
	Len() int
	// Runnable is the number of events Pop could hand out now: Len, unless
	// the scheduler holds events back (see Keyed).
	Runnable() int
	// RemoveIf removes the events for which f returns true and returns
	// them, oldest first where the scheduler knows the order.
	RemoveIf(f func(Event) bool) []Event
}

// Releaser is implemented by schedulers that hold events back until earlier
// ones have been handled. The runtime calls Queue.Release with every batch
// it has finished, which passes it on.
type Releaser interface {
	Release(events []Event)
}

// ErrSchedulerBusy is returned by SetScheduler on a queue that holds events.
var ErrSchedulerBusy = errors.New("sink: scheduler can only be set on an empty queue")

// SetScheduler makes q hand out its events in the order s decides (nil:
// FIFO). Set it before the queue is used: it fails with ErrSchedulerBusy
// while the queue holds events.
func (q *Queue) SetScheduler(s Scheduler) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.count != 0 || q.reserved != 0 {
		return fmt.Errorf("%w (queue %q holds %d)", ErrSchedulerBusy, q.name, q.count+q.reserved)
	}
	q.sched = s
	q.release, _ = s.(Releaser)
	q.slow = q.sched != nil || q.pauses > 0
	q.noteLocked()
	return nil
}

// Scheduler returns the queue's scheduler, or nil for plain FIFO.
func (q *Queue) Scheduler() Scheduler {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sched
}

// Pause stops Dequeue from handing out events (it returns 0) until the
// matching Resume; enqueues go on. The runtime pauses a stage's queue while
// it swaps the stage's handler. Pauses nest.
func (q *Queue) pause() {
	q.mu.Lock()
	q.pauses++
	q.slow = true
	q.noteLocked()
	q.mu.Unlock()
}

// Resume undoes one Pause and wakes a consumer.
func (q *Queue) resume() {
	q.mu.Lock()
	if q.pauses > 0 {
		q.pauses--
	}
	q.slow = q.sched != nil || q.pauses > 0
	q.noteLocked()
	q.mu.Unlock()
	q.signalReady()
}

// Paused reports whether the queue is paused.
func (q *Queue) paused() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pauses > 0
}

// Runnable is the number of events Dequeue could hand out now: Len for a
// FIFO queue, fewer when a scheduler holds events back, 0 while paused.
// Thread managers that choose among queues use it to skip queues with
// nothing to run.
func (q *Queue) runnableNow() int {
	if !q.slowFlag.Load() {
		return q.Len()
	}
	return int(q.runnable.Load())
}

// Release tells the queue's scheduler that the runtime has finished
// handling events (a batch it dequeued), so that events held back behind
// them may run. It does nothing for schedulers that hold nothing back.
func (q *Queue) releaseEvents(events []Event) {
	q.mu.Lock()
	if q.release == nil {
		q.mu.Unlock()
		return
	}
	q.release.Release(events)
	q.noteLocked()
	more := q.pauses == 0 && q.runnableLocked() > 0
	q.mu.Unlock()
	if more {
		q.signalReady()
	}
}

// RemoveIf takes the queued events for which f returns true out of the
// queue and returns them; the predicate gets them back as cancelled
// (Canceler). The runtime uses it to fail the pending events of a principal
// whose event failed. f runs with the queue locked: keep it short and do not
// touch the queue from it.
func (q *Queue) removeIf(f func(Event) bool) []Event {
	q.mu.Lock()
	var out []Event
	if q.sched != nil {
		out = q.sched.RemoveIf(f)
	} else {
		out = q.removeRingLocked(f)
	}
	q.count -= len(out)
	q.noteLocked()
	more := q.pauses == 0 && q.runnableLocked() > 0
	q.mu.Unlock()
	if len(out) > 0 {
		q.removed.Add(uint64(len(out)))
		t := Ticket{q.adm.box.Load()}
		for _, e := range out {
			t.Cancel(e)
		}
		q.signalSpace()
	}
	if more {
		q.signalReady()
	}
	return out
}

// removeRingLocked filters the FIFO ring in place.
func (q *Queue) removeRingLocked(f func(Event) bool) []Event {
	var out []Event
	kept := 0
	for i := 0; i < q.count; i++ {
		slot := &q.ring[(q.head+i)%len(q.ring)]
		if f(slot.ev) {
			out = append(out, slot.ev)
			continue
		}
		q.ring[(q.head+kept)%len(q.ring)] = *slot
		kept++
	}
	for i := kept; i < q.count; i++ {
		q.ring[(q.head+i)%len(q.ring)] = entry{}
	}
	return out
}

func (q *Queue) runnableLocked() int {
	switch {
	case q.pauses > 0:
		return 0
	case q.sched != nil:
		return q.sched.Runnable()
	default:
		return q.count
	}
}

// noteLocked publishes the queue's length (and, on the slow path, the
// runnable count) after a change. The caller holds q.mu.
func (q *Queue) noteLocked() {
	q.length.Store(int64(q.count))
	q.slowFlag.Store(q.slow)
	if q.slow {
		q.runnable.Store(int64(q.runnableLocked()))
	}
}

// dequeueSlow is Dequeue for a paused queue or one with a scheduler. The
// caller holds q.mu; dequeueSlow releases it.
func (q *Queue) dequeueSlow(dst []Event, stamps []int64) int {
	n := 0
	if q.pauses == 0 {
		n = q.sched.Pop(dst, stamps)
		q.count -= n
		if n > 0 {
			q.dequeued += uint64(n)
			q.batches++
		}
	}
	q.noteLocked()
	more := q.runnableLocked() > 0
	q.mu.Unlock()
	if n > 0 {
		q.signalSpace()
	}
	if more {
		q.signalReady()
	}
	return n
}

// ---- FIFO ----

// entries is a growable FIFO of entries.
type entries struct{ ring.Ring[entry] }

func (r *entries) push(e Event, stamp int64) { r.Push(entry{ev: e, stamp: stamp}) }

func (r *entries) pop() entry {
	x, _ := r.Pop()
	return x
}

// removeIf takes the events f selects out of r, in order, onto out.
func (r *entries) removeIf(f func(Event) bool, out []Event) []Event {
	r.DeleteFunc(func(x entry) bool {
		if f(x.ev) {
			out = append(out, x.ev)
			return true
		}
		return false
	})
	return out
}

func popInto(e entry, dst []Event, stamps []int64, i int) {
	dst[i] = e.ev
	if stamps != nil {
		stamps[i] = e.stamp
	}
}

type fifo struct{ r entries }

// NewFIFO returns a first-in first-out scheduler. A queue without a
// scheduler is FIFO already and faster; NewFIFO is for composing, for
// example as the inner order of NewKeyed.
func NewFIFO() Scheduler { return &fifo{} }

func (s *fifo) Push(e Event, stamp int64) { s.r.push(e, stamp) }
func (s *fifo) Len() int                  { return s.r.Len() }
func (s *fifo) Runnable() int             { return s.r.Len() }
func (s *fifo) Pop(dst []Event, stamps []int64) int {
	n := min(len(dst), s.r.Len())
	for i := 0; i < n; i++ {
		popInto(s.r.pop(), dst, stamps, i)
	}
	return n
}
func (s *fifo) RemoveIf(f func(Event) bool) []Event { return s.r.removeIf(f, nil) }

// ---- LIFO ----

type lifo struct{ stack []entry }

// NewLIFO returns a last-in first-out scheduler: the newest event runs
// first. Under a burst of time-limited requests it serves the ones that
// can still meet their deadline (JOBS §4.6) and keeps the freshest data in
// cache; old events may wait indefinitely while new ones keep coming.
func NewLIFO() Scheduler { return &lifo{} }

func (s *lifo) Push(e Event, stamp int64) { s.stack = append(s.stack, entry{ev: e, stamp: stamp}) }
func (s *lifo) Len() int                  { return len(s.stack) }
func (s *lifo) Runnable() int             { return len(s.stack) }
func (s *lifo) Pop(dst []Event, stamps []int64) int {
	n := min(len(dst), len(s.stack))
	top := len(s.stack) - 1
	for i := 0; i < n; i++ {
		popInto(s.stack[top-i], dst, stamps, i)
		s.stack[top-i] = entry{}
	}
	s.stack = s.stack[:len(s.stack)-n]
	return n
}
func (s *lifo) RemoveIf(f func(Event) bool) []Event {
	var out []Event
	kept := s.stack[:0]
	for _, x := range s.stack {
		if f(x.ev) {
			out = append(out, x.ev)
			continue
		}
		kept = append(kept, x)
	}
	clear(s.stack[len(kept):])
	s.stack = kept
	return out
}

// ---- priority ----

type priorityLevel struct {
	prio int
	r    entries
}

type prioritySched struct {
	prio   func(Event) int
	levels []*priorityLevel // highest priority first
	n      int
}

// NewPriority returns a scheduler that runs events of higher priority
// first, FIFO within a priority. prio gives an event's priority (the
// runtime passes its principal's). Low priorities starve while higher ones
// keep the stage busy: that is the point, and admission control should
// bound how long.
func NewPriority(prio func(Event) int) Scheduler { return &prioritySched{prio: prio} }

func (s *prioritySched) level(p int) *priorityLevel {
	i, found := slices.BinarySearchFunc(s.levels, p, func(l *priorityLevel, p int) int {
		switch {
		case l.prio > p:
			return -1
		case l.prio < p:
			return 1
		}
		return 0
	})
	if !found {
		s.levels = slices.Insert(s.levels, i, &priorityLevel{prio: p})
	}
	return s.levels[i]
}

func (s *prioritySched) Push(e Event, stamp int64) {
	s.level(s.prio(e)).r.push(e, stamp)
	s.n++
}
func (s *prioritySched) Len() int      { return s.n }
func (s *prioritySched) Runnable() int { return s.n }
func (s *prioritySched) Pop(dst []Event, stamps []int64) int {
	i := 0
	for _, l := range s.levels {
		for i < len(dst) && l.r.Len() > 0 {
			popInto(l.r.pop(), dst, stamps, i)
			i++
		}
		if i == len(dst) {
			break
		}
	}
	s.n -= i
	return i
}
func (s *prioritySched) RemoveIf(f func(Event) bool) []Event {
	var out []Event
	for _, l := range s.levels {
		out = l.r.removeIf(f, out)
	}
	s.n -= len(out)
	return out
}

// ---- stride ----

// strideOne is the stride of a class holding one ticket.
const strideOne = 1 << 20

type strideClass struct {
	class  int
	stride uint64
	pass   uint64
	r      entries
}

type strideSched struct {
	class   func(Event) int
	tickets map[int]int
	classes []*strideClass // sorted by class
	vtime   uint64         // pass of the last class served
	n       int
}

// NewStride returns a stride scheduler (Waldspurger & Weihl): classes
// share the stage in proportion to their tickets, so two backlogged classes
// holding 1 and 3 tickets get one event in four and three in four, exactly
// up to rounding, without starving either. class gives an event's class
// (the runtime passes its principal's); a class missing from tickets holds
// one ticket. A class that falls idle does not bank credit: when it comes
// back it starts level with the others. FIFO within a class.
func NewStride(tickets map[int]int, class func(Event) int) (Scheduler, error) {
	t := make(map[int]int, len(tickets))
	for c, n := range tickets {
		if n <= 0 {
			return nil, fmt.Errorf("sink: stride: class %d: tickets must be positive, got %d", c, n)
		}
		t[c] = n
	}
	return &strideSched{class: class, tickets: t}, nil
}

func (s *strideSched) get(c int) *strideClass {
	i := sort.Search(len(s.classes), func(i int) bool { return s.classes[i].class >= c })
	if i < len(s.classes) && s.classes[i].class == c {
		return s.classes[i]
	}
	n := s.tickets[c]
	if n <= 0 {
		n = 1
	}
	sc := &strideClass{class: c, stride: strideOne / uint64(n)}
	s.classes = slices.Insert(s.classes, i, sc)
	return sc
}

func (s *strideSched) Push(e Event, stamp int64) {
	c := s.get(s.class(e))
	if c.r.Len() == 0 && c.pass < s.vtime {
		c.pass = s.vtime // no credit for idle time
	}
	c.r.push(e, stamp)
	s.n++
}
func (s *strideSched) Len() int      { return s.n }
func (s *strideSched) Runnable() int { return s.n }
func (s *strideSched) Pop(dst []Event, stamps []int64) int {
	i := 0
	for ; i < len(dst) && s.n > 0; i++ {
		var best *strideClass
		for _, c := range s.classes {
			if c.r.Len() > 0 && (best == nil || c.pass < best.pass) {
				best = c
			}
		}
		popInto(best.r.pop(), dst, stamps, i)
		s.vtime = best.pass
		best.pass += best.stride
		s.n--
	}
	return i
}
func (s *strideSched) RemoveIf(f func(Event) bool) []Event {
	var out []Event
	for _, c := range s.classes {
		out = c.r.removeIf(f, out)
	}
	s.n -= len(out)
	return out
}

// ---- shortest first within a batch ----

type sized struct {
	e    entry
	size float64
}

type shortest struct {
	fifo
	size func(Event) float64
	buf  []sized
}

// NewShortest returns a scheduler that takes events in FIFO order and
// hands each batch out shortest first (Haboob's page cache: small responses
// before large ones within a batch). Ordering only within a batch bounds
// how long a large event can wait. size gives an event's size or cost.
func NewShortest(size func(Event) float64) Scheduler { return &shortest{size: size} }

func (s *shortest) Pop(dst []Event, stamps []int64) int {
	n := min(len(dst), s.r.Len())
	s.buf = s.buf[:0]
	for i := 0; i < n; i++ {
		x := s.r.pop()
		s.buf = append(s.buf, sized{e: x, size: s.size(x.ev)})
	}
	slices.SortStableFunc(s.buf, func(a, b sized) int {
		switch {
		case a.size < b.size:
			return -1
		case a.size > b.size:
			return 1
		}
		return 0
	})
	for i, x := range s.buf {
		popInto(x.e, dst, stamps, i)
	}
	clear(s.buf)
	return n
}

// ---- keyed ----

type keyState struct {
	pending entries // events behind the one scheduled or running
	running bool    // the key's head event has been handed out
}

// Keyed is a scheduler that handles events with the same key one at a
// time, in FIFO order, while events of different keys run in parallel
// (Whirlwind processes: a connection, a session or a file is a sequential
// process, and its handler code needs no locks). Of each key only the
// oldest event is visible to the inner scheduler, which orders the keys
// (and the unkeyed events); the next event of a key becomes visible when
// the runtime releases the previous one (Queue.Release). A batch thus holds
// at most one event per key.
type Keyed struct {
	key   func(Event) (string, bool)
	inner Scheduler
	keys  map[string]*keyState
	held  int // events in pending lists
	spare []*keyState
}

var (
	_ Scheduler = (*Keyed)(nil)
	_ Releaser  = (*Keyed)(nil)
)

// NewKeyed wraps inner (nil: FIFO) with per-key sequencing. key returns an
// event's key and false for events that have none; those run unordered.
func NewKeyed(key func(Event) (string, bool), inner Scheduler) *Keyed {
	if inner == nil {
		inner = NewFIFO()
	}
	return &Keyed{key: key, inner: inner, keys: map[string]*keyState{}}
}

// Push implements Scheduler.
func (s *Keyed) Push(e Event, stamp int64) {
	k, ok := s.key(e)
	if !ok {
		s.inner.Push(e, stamp)
		return
	}
	if ks := s.keys[k]; ks != nil {
		ks.pending.push(e, stamp)
		s.held++
		return
	}
	s.keys[k] = s.newState()
	s.inner.Push(e, stamp)
}

func (s *Keyed) newState() *keyState {
	if n := len(s.spare); n > 0 {
		ks := s.spare[n-1]
		s.spare = s.spare[:n-1]
		return ks
	}
	return &keyState{}
}

func (s *Keyed) drop(k string, ks *keyState) {
	delete(s.keys, k)
	pending := ks.pending
	pending.Clear() // keeps its buffer for reuse
	*ks = keyState{pending: pending}
	if len(s.spare) < 1024 && pending.Cap() <= 64 {
		s.spare = append(s.spare, ks)
	}
}

// Pop implements Scheduler.
func (s *Keyed) Pop(dst []Event, stamps []int64) int {
	n := s.inner.Pop(dst, stamps)
	for _, e := range dst[:n] {
		if k, ok := s.key(e); ok {
			if ks := s.keys[k]; ks != nil {
				ks.running = true
			}
		}
	}
	return n
}

// Release implements Releaser: the next event of each released key
// becomes runnable.
func (s *Keyed) Release(events []Event) {
	for _, e := range events {
		k, ok := s.key(e)
		if !ok {
			continue
		}
		ks := s.keys[k]
		if ks == nil || !ks.running {
			continue
		}
		ks.running = false
		s.promote(k, ks)
	}
}

// promote hands a key's next event to the inner scheduler, or forgets the
// key when it has none.
func (s *Keyed) promote(k string, ks *keyState) {
	if ks.pending.Len() == 0 {
		s.drop(k, ks)
		return
	}
	x := ks.pending.pop()
	s.held--
	s.inner.Push(x.ev, x.stamp)
}

// Len implements Scheduler.
func (s *Keyed) Len() int { return s.inner.Len() + s.held }

// Runnable implements Scheduler.
func (s *Keyed) Runnable() int { return s.inner.Runnable() }

// Keys returns the number of keys with events queued or running.
func (s *Keyed) Keys() int { return len(s.keys) }

// RemoveIf implements Scheduler. A key whose visible event is removed
// moves on to its next remaining event.
func (s *Keyed) RemoveIf(f func(Event) bool) []Event {
	out := s.inner.RemoveIf(f)
	var heads []string
	for _, e := range out {
		if k, ok := s.key(e); ok {
			heads = append(heads, k)
		}
	}
	for _, ks := range s.keys {
		before := len(out)
		out = ks.pending.removeIf(f, out)
		s.held -= len(out) - before
	}
	for _, k := range heads {
		if ks := s.keys[k]; ks != nil && !ks.running {
			s.promote(k, ks)
		}
	}
	return out
}

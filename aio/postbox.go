package aio

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/sandstorm-go/sandstorm/sink"
)

// delivery is an event for a user sink.
type delivery struct {
	to Receiver
	ev sink.Event
}

// postbox delivers events to user sinks in order without ever blocking: an
// event a sink rejects waits, with everything after it, until a retry (the
// socket's maintenance loop calls drain again). Events refused for good (the
// sink is closed) are handed to its hooks' lostEvent, which logs and counts
// them.
type postbox struct {
	// state is boxBusy (a goroutine is delivering; it will take what is
	// appended) and boxQueued (q is not empty; changed only under mu,
	// with q). A packet's delivery claims the box and ends its claim with
	// one compare-and-swap each, and reads whether it is empty with a
	// load, without mu: three lock round trips per packet were six locked
	// instructions, a fifth of a request's (docs/haboob-bench.md,
	// "Cutting the cold lines").
	state atomic.Uint32
	mu    sync.Mutex
	q     deque[delivery]

	hooks boxHooks // nil: none
}

const (
	boxBusy   uint32 = 1
	boxQueued uint32 = 2
)

// boxHooks are what a postbox calls back: its owner's scheduling and
// accounting. (Methods of the connection or engine that owns it, not
// closures: a connection's postbox used to cost four objects per
// connection.)
type boxHooks interface {
	retryDrain()               // schedules a later drain
	drainSoon()                // schedules a drain as soon as possible (post)
	lostEvent(delivery, error) // an event that can never be delivered
	countRejected()            // counts a rejection
}

// send delivers d after everything already waiting. It reports whether
// the postbox is empty afterwards (d and everything before it delivered or
// lost); if not, a retry is scheduled.
func (o *postbox) send(d delivery) bool {
	if !o.claim() {
		return o.queue(d)
	}
	// Fast path: nothing waits, deliver without queueing.
	return o.delivered(d, d.to.Enqueue(d.ev))
}

// sendPacket is send for a Packet to the reader to: a PacketReceiver is
// handed it by value when nothing waits before it, with no sink.Event
// boxed; a packet it refuses waits as an event, as any other's.
func (o *postbox) sendPacket(to Receiver, p Packet) bool {
	pr, ok := to.(PacketReceiver)
	if !ok {
		return o.send(delivery{to: to, ev: p})
	}
	if !o.claim() {
		return o.queue(delivery{to: to, ev: p})
	}
	err := pr.ReceivePacket(p)
	var d delivery
	if err != nil {
		d = delivery{to: to, ev: p} // boxed only to wait or to be counted lost
	}
	return o.delivered(d, err)
}

// lendPacket is sendPacket for a packet whose Data is lent (valid only
// during the call): the borrower is handed it while nothing waits before
// it; a packet that must wait (or be counted lost) is copied first.
func (o *postbox) lendPacket(to PacketBorrower, p Packet) bool {
	if !o.claim() {
		p.Data = bytes.Clone(p.Data)
		return o.queue(delivery{to: to, ev: p})
	}
	err := to.BorrowPacket(p)
	var d delivery
	if err != nil {
		p.Data = bytes.Clone(p.Data)
		d = delivery{to: to, ev: p}
	}
	return o.delivered(d, err)
}

// claim makes the caller the delivering goroutine if nothing waits and
// nobody delivers.
func (o *postbox) claim() bool {
	return o.state.CompareAndSwap(0, boxBusy)
}

// acquireLocked makes the caller, holding mu, the delivering goroutine
// unless another one is.
func (o *postbox) acquireLocked() bool {
	for {
		s := o.state.Load()
		if s&boxBusy != 0 {
			return false
		}
		if o.state.CompareAndSwap(s, s|boxBusy) {
			return true
		}
	}
}

// pushLocked and popLocked change q with mu held, and boxQueued with it.
func (o *postbox) pushLocked(d delivery) uint32 {
	o.q.push(d)
	return o.state.Or(boxQueued)
}

func (o *postbox) popLocked() delivery {
	d := o.q.pop()
	if o.q.len() == 0 {
		o.state.And(^boxQueued)
	}
	return d
}

// queue puts d behind what waits and delivers it unless another
// goroutine is delivering (it takes d).
func (o *postbox) queue(d delivery) bool {
	o.mu.Lock()
	old := o.pushLocked(d)
	o.mu.Unlock()
	if old&boxBusy != 0 {
		// The busy goroutine delivers it or schedules a retry: its end
		// of the claim finds boxQueued set.
		return false
	}
	return o.drain()
}

// delivered ends a claimed delivery of d whose sink answered err (d is
// used only if err is not nil): a rejected d waits first in line, a d
// refused for good is lost; then what was queued meanwhile is delivered.
func (o *postbox) delivered(d delivery, err error) bool {
	if err != nil && retryable(err) {
		o.mu.Lock()
		o.q.pushFront(d)
		o.state.Or(boxQueued)
		o.state.And(^boxBusy)
		o.mu.Unlock()
		o.rejectedOnce()
		return false
	}
	if err != nil && o.hooks != nil {
		o.hooks.lostEvent(d, err)
	}
	if o.state.CompareAndSwap(boxBusy, 0) {
		return true // nothing was queued meanwhile
	}
	o.mu.Lock()
	o.state.And(^boxBusy)
	more := o.q.len() > 0
	o.mu.Unlock()
	if more {
		return o.drain()
	}
	return true
}

// post queues d behind everything waiting and has the maintenance
// goroutine deliver it: unlike send, it never delivers on the caller's
// goroutine. For events raised on an application's call into the socket
// (Enqueue, Commit): delivering there would run sinks, possibly the
// caller's own, inside the call, which may hold the caller's locks.
func (o *postbox) post(d delivery) {
	o.mu.Lock()
	o.pushLocked(d)
	o.mu.Unlock()
	if o.hooks != nil {
		o.hooks.drainSoon()
	}
}

// retryable reports whether a refusal may be retried later: a rejection,
// not a closed sink or another error.
func retryable(err error) bool {
	return errors.Is(err, sink.ErrRejected) && !errors.Is(err, sink.ErrClosed)
}

func (o *postbox) rejectedOnce() {
	if o.hooks != nil {
		o.hooks.countRejected()
		o.hooks.retryDrain()
	}
}

// sendNow delivers d only if nothing is waiting before it and the sink
// accepts it at once; otherwise it returns the refusal and keeps nothing.
// Deliveries by sendNow may run concurrently (they carry independent
// events, such as the connections accepted by different event loops).
func (o *postbox) sendNow(d delivery) error {
	if o.state.Load()&boxQueued != 0 {
		return errBacklog
	}
	return d.to.Enqueue(d.ev)
}

var errBacklog = errors.New("aio: earlier events still waiting for their sink")

// drain delivers waiting events in order until one is rejected. It reports
// whether the postbox is empty.
func (o *postbox) drain() bool {
	o.mu.Lock()
	if !o.acquireLocked() {
		o.mu.Unlock()
		return false
	}
	for o.q.len() > 0 {
		d := *o.q.front()
		o.mu.Unlock()
		err := d.to.Enqueue(d.ev)
		if err != nil && retryable(err) {
			o.state.And(^boxBusy) // d stays first in line
			o.rejectedOnce()
			return false
		}
		if err != nil && o.hooks != nil {
			o.hooks.lostEvent(d, err)
		}
		o.mu.Lock()
		o.popLocked()
	}
	o.state.And(^boxBusy)
	o.mu.Unlock()
	return true
}

// empty reports whether nothing waits.
func (o *postbox) empty() bool {
	return o.state.Load() == 0
}

// discard empties the postbox and returns what it held.
func (o *postbox) discard() []delivery {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []delivery
	for o.q.len() > 0 {
		out = append(out, o.popLocked())
	}
	return out
}

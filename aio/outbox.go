package aio

import (
	"errors"
	"sync"

	"github.com/sandstorm-go/sandstorm/sink"
)

// delivery is an event for a user sink.
type delivery struct {
	to sink.Sink
	ev sink.Event
}

// outbox delivers events to user sinks in order without ever blocking: an
// event a sink rejects waits, with everything after it, until retry (the
// socket's maintenance loop calls drain again). Events refused for good (the
// sink is closed) are handed to lost, which logs and counts them.
type outbox struct {
	mu   sync.Mutex
	q    []delivery
	busy bool // a goroutine is delivering; it will take what is appended

	retry    func()                // schedules a later drain
	lost     func(delivery, error) // an event that can never be delivered
	rejected func()                // counts a rejection
}

// send appends d and delivers as much as it can. It reports whether the
// outbox is empty afterwards (d and everything before it delivered or lost).
func (o *outbox) send(d delivery) bool {
	o.mu.Lock()
	o.q = append(o.q, d)
	if o.busy {
		o.mu.Unlock()
		return false
	}
	o.mu.Unlock()
	return o.drain()
}

// sendNow delivers d only if nothing is waiting before it and the sink
// accepts it at once; otherwise it returns the refusal and keeps nothing.
func (o *outbox) sendNow(d delivery) error {
	o.mu.Lock()
	if o.busy || len(o.q) > 0 {
		o.mu.Unlock()
		return errBacklog
	}
	o.busy = true
	o.mu.Unlock()
	err := d.to.Enqueue(d.ev)
	o.mu.Lock()
	o.busy = false
	more := len(o.q) > 0
	o.mu.Unlock()
	if more {
		o.drain()
	}
	return err
}

var errBacklog = errors.New("aio: earlier events still waiting for their sink")

// drain delivers waiting events in order until one is rejected. It reports
// whether the outbox is empty.
func (o *outbox) drain() bool {
	o.mu.Lock()
	if o.busy {
		o.mu.Unlock()
		return false
	}
	o.busy = true
	for len(o.q) > 0 {
		d := o.q[0]
		o.mu.Unlock()
		err := d.to.Enqueue(d.ev)
		o.mu.Lock()
		if err != nil && errors.Is(err, sink.ErrRejected) && !errors.Is(err, sink.ErrClosed) {
			o.busy = false
			o.mu.Unlock()
			if o.rejected != nil {
				o.rejected()
			}
			if o.retry != nil {
				o.retry()
			}
			return false
		}
		o.q[0] = delivery{}
		o.q = o.q[1:]
		if err != nil && o.lost != nil {
			o.mu.Unlock()
			o.lost(d, err)
			o.mu.Lock()
		}
	}
	o.q = nil
	o.busy = false
	o.mu.Unlock()
	return true
}

// empty reports whether nothing waits.
func (o *outbox) empty() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.q) == 0 && !o.busy
}

// discard empties the outbox and returns what it held.
func (o *outbox) discard() []delivery {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.q
	o.q = nil
	return q
}

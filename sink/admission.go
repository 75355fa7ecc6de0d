package sink

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Admission is the admission control of one Sink: the one place where a
// sink installs its predicate, asks it about events, and gives it back
// the outcome of every event it admitted. Every Sink of the framework (a
// Queue, an aio or HTTP connection, a remote sender) holds one; a new
// Sink should too, in an unexported field, with its SetPredicate and
// Predicate methods forwarding to it:
//
//	type conn struct {
//		adm sink.Admission
//		// ...
//	}
//
//	func (c *conn) SetPredicate(p sink.Predicate) { c.adm.SetPredicate(c, p) }
//	func (c *conn) Predicate() sink.Predicate     { return c.adm.Predicate() }
//
// The zero value admits everything. An Admission is safe for concurrent
// use and must not be copied after first use.
//
// The contract, between the Admission, the sink that holds it and the
// predicate p:
//
//   - SetPredicate binds p to the sink (every Binder of p's tree, see
//     Composite) before any Admit asks it, then installs it; Admit and
//     AdmitMany may run concurrently with it.
//   - Admit and AdmitMany ask p. A refusal is returned as the predicate's
//     *RejectError (it wraps ErrRejected and names the sink and p; the
//     same value every time, so a rejection does not allocate) and
//     counted in Rejected. Check the sink's own reasons to refuse (closed,
//     full) before Admit where you can: then an event refused for them
//     costs the predicate nothing; one refused after Admit is cancelled.
//     Non-rejectable events (NonRejectable) are asked like any other
//     (enqueuepred's predicates admit and charge them).
//   - Every admitted event gets exactly one of Ticket.Done or
//     Ticket.Cancel on the Ticket Admit returned. This is the sink's duty:
//     Done once the event has been handled (a stage's handler ran on it,
//     successfully or not; a connection wrote it; a remote replica took
//     it), Cancel when the sink did not keep it after all (queue full,
//     sink closed, transaction aborted, send failed, event dropped
//     unhandled). A concurrency limit (a counter) gets its credit back
//     this way; a sink that forgets leaks credit until its predicate
//     refuses everything, and one that completes twice lets it admit too
//     much. package sinktest checks it.
//   - The Ticket remembers the predicate that admitted the event, so an
//     event admitted before SetPredicate replaced p still completes on p,
//     and it reaches every Completer or Canceler of p's tree: wrappers
//     and composites forward nothing themselves.
//
// Admit costs one atomic load and the predicate's Accept; it does not
// allocate.
type Admission struct {
	box      atomic.Pointer[admBox]
	mu       sync.Mutex // serializes installs
	rejected atomic.Uint64
}

// admBox is one installed predicate with what Admission looked up about
// it once, at install time.
type admBox struct {
	p   Predicate // nil: every event admitted
	err *RejectError
	// The hooks of every predicate of p's tree (Composite), found once:
	// a Ticket completes an event on all of them.
	done   []Completer
	shares []bool // shares[i]: done[i] is a ServiceSharer
	cancel []Canceler
	shed   []Shedder
	// since is the stamp from which events were admitted by p, for a sink
	// that stamps its events (Queue): events stamped earlier were admitted
	// by prev (or older). See Admission.at.
	since int64
	prev  atomic.Pointer[admBox] // cut, never rewritten otherwise, once published
	// completes: this box or one in its history has a Completer.
	completes bool
}

// Ticket says which installed predicate admitted an event: the value
// Admit and AdmitMany return with an admitted event, to be used exactly
// once, with Done or Cancel, when the sink is through with the event. It
// is small (one pointer); keep it beside the event. The zero Ticket (an
// event admitted while no predicate was installed) completes nothing.
type Ticket struct{ b *admBox }

// Done tells the predicate that admitted e that e has been handled,
// successfully or not (Completer): queued is the time e waited in the
// sink, service the time its handling took (for a batch, the batch's).
func (t Ticket) Done(e Event, queued, service time.Duration) {
	if t.b == nil {
		return
	}
	for _, c := range t.b.done {
		c.Done(e, queued, service)
	}
}

// Cancel tells the predicate that admitted e that the sink did not keep e
// after all (Canceler): it gives back what it charged for it.
func (t Ticket) Cancel(e Event) {
	if t.b == nil {
		return
	}
	for _, c := range t.b.cancel {
		c.Cancel(e)
	}
}

// Predicate returns the predicate that admitted the event, or nil.
func (t Ticket) Predicate() Predicate {
	if t.b == nil {
		return nil
	}
	return t.b.p
}

// completer returns what completes b's events: its one Completer unless
// it is a ServiceSharer, b itself when its predicate tree has several or
// a ServiceSharer (b completes batches, sinkrt.BatchCompleter), nil when
// none (or b is nil).
func (b *admBox) completer() Completer {
	switch {
	case b == nil || len(b.done) == 0:
		return nil
	case len(b.done) == 1 && !b.shares[0]:
		return b.done[0]
	}
	return b
}

// Done completes e on every Completer of b.
func (b *admBox) Done(e Event, queued, service time.Duration) {
	for _, c := range b.done {
		c.Done(e, queued, service)
	}
}

// DoneInBatch completes e, one of n events handled together in service,
// on every Completer of b: a ServiceSharer is charged e's share of
// service, the others service (see ServiceSharer).
func (b *admBox) DoneInBatch(e Event, queued, service time.Duration, n int) {
	share := service
	if n > 1 {
		share = service / time.Duration(n)
	}
	for i, c := range b.done {
		if b.shares[i] {
			c.Done(e, queued, share)
		} else {
			c.Done(e, queued, service)
		}
	}
}

// sheds reports whether a Shedder of b sheds e after waited in the queue.
func (b *admBox) sheds(e Event, waited time.Duration) bool {
	for _, s := range b.shed {
		if s.Shed(e, waited) {
			return true
		}
	}
	return false
}

// historyLen bounds the chain of replaced predicates an Admission keeps
// for sinks that find the predicate of an event by its stamp (Queue).
const historyLen = 8

// SetPredicate installs p (nil: admit everything) for the sink self that
// holds a (nil only outside a sink, in tests): every Binder of p's tree
// (p, and through Composite the predicates it is built from) is bound to
// self first, and the Completers, Cancelers and Shedders of the tree are
// looked up once, so that a Ticket completes an event on each of them. Rejections name
// self by its Name method, else its String method. Events admitted by
// the predicate p replaces still complete on it (their Tickets hold it).
func (a *Admission) SetPredicate(self Sink, p Predicate) {
	nb := newAdmBox(self, p)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.installLocked(nb, Nanotime())
}

// Predicate returns the installed predicate, or nil.
func (a *Admission) Predicate() Predicate {
	if b := a.box.Load(); b != nil {
		return b.p
	}
	return nil
}

// Admit asks the installed predicate about e. It returns the Ticket to
// complete e with, or the predicate's *RejectError (wrapping ErrRejected)
// when it refuses, counted in Rejected.
func (a *Admission) Admit(e Event) (Ticket, error) {
	b := a.box.Load()
	if b == nil || b.p == nil {
		return Ticket{}, nil
	}
	if !b.p.Accept(e) {
		a.rejected.Add(1)
		return Ticket{}, b.err
	}
	return Ticket{b}, nil
}

// AdmitMany admits all of es or none (EnqueueMany, Prepare). On success
// the one Ticket returned completes each event of es: call its Done or
// Cancel once per event. When the predicate refuses one event, those it
// had admitted before are cancelled, the whole batch is counted in
// Rejected, and the predicate's *RejectError is returned.
func (a *Admission) AdmitMany(es []Event) (Ticket, error) {
	b := a.box.Load()
	if b == nil || b.p == nil || len(es) == 0 {
		return Ticket{}, nil
	}
	t := Ticket{b}
	for i, e := range es {
		if !b.p.Accept(e) {
			for _, back := range es[:i] {
				t.Cancel(back)
			}
			a.rejected.Add(uint64(len(es)))
			return Ticket{}, b.err
		}
	}
	return t, nil
}

// Rejected returns how many events the predicates refused.
func (a *Admission) Rejected() uint64 { return a.rejected.Load() }

// newAdmBox binds p to self and looks up its hooks, for installLocked.
func newAdmBox(self Sink, p Predicate) *admBox {
	nb := &admBox{}
	if p == nil {
		return nb
	}
	Bind(p, self)
	nb.p = p
	nb.err = &RejectError{Sink: sinkName(self), Predicate: PredicateName(p), Reason: "admission refused"}
	Walk(p, func(q Predicate) {
		if c, ok := q.(Completer); ok {
			_, share := c.(ServiceSharer)
			nb.done = append(nb.done, c)
			nb.shares = append(nb.shares, share)
		}
		if c, ok := q.(Canceler); ok {
			nb.cancel = append(nb.cancel, c)
		}
		if s, ok := q.(Shedder); ok {
			nb.shed = append(nb.shed, s)
		}
	})
	return nb
}

// installLocked publishes nb, admitting from stamp since on (a sink that
// stamps its events gives a since above every stamp given before and at
// most every stamp given after). The caller holds a.mu.
func (a *Admission) installLocked(nb *admBox, since int64) {
	old := a.box.Load()
	if old == nil && nb.p == nil {
		return
	}
	nb.since = since
	nb.prev.Store(old)
	nb.completes = len(nb.done) > 0
	for i, b := 1, old; b != nil; i, b = i+1, b.prev.Load() {
		if i == historyLen {
			b.prev.Store(nil) // older admissions are forgotten
		}
		nb.completes = nb.completes || len(b.done) > 0
	}
	a.box.Store(nb)
}

// stamped reports whether the installed predicate wants every event's
// stamp: it is told queueing times (Completer) or may get events back
// (Canceler).
func (b *admBox) stamped() bool {
	return b != nil && (len(b.done) > 0 || len(b.cancel) > 0)
}

// at returns the box of the predicate that admitted an event stamped
// stamp, for a sink that stamps (Queue): the installed one for an
// unstamped event (0), nil if it is older than the history.
func (a *Admission) at(stamp int64) *admBox {
	b := a.box.Load()
	if stamp == 0 {
		if b.stamped() {
			return nil // its events are all stamped: this one is older
		}
		return b
	}
	for ; b != nil; b = b.prev.Load() {
		if stamp >= b.since {
			return b
		}
	}
	return nil
}

// mayComplete reports whether completions may be owed to a predicate:
// the installed one, or one it replaced, is a Completer.
func (a *Admission) mayComplete() bool {
	b := a.box.Load()
	return b != nil && b.completes
}

// sinkName names a sink in rejections: its Name, else its String.
func sinkName(s Sink) string {
	switch v := s.(type) {
	case interface{ Name() string }:
		return v.Name()
	case fmt.Stringer:
		return v.String()
	}
	return ""
}

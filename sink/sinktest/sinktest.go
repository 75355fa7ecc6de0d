// Package sinktest checks that a sink.Sink keeps the Sink contract and
// the admission contract (DESIGN §2), the way testing/fstest checks an
// fs.FS and golang.org/x/net/nettest a net.Conn. Every implementation of
// sink.Sink in the framework runs it: sink.Queue, a stage's queue driven
// by the runtime, aio and HTTP connections over loopback sockets, the
// remote request and durable sinks.
//
// Start with Run: give it a function that builds a fresh sink and the
// means to take accepted events out of it (a Harness), and it runs one
// subtest per property:
//
//   - SetPredicate binds (sink.Binder) and Predicate returns what was set;
//     nil admits everything;
//   - a refusal wraps sink.ErrRejected, and a refusal by the predicate is
//     a *sink.RejectError naming it; EnqueueLossy reports false;
//     refused events never come out of the sink;
//   - EnqueueMany and Prepare are all or nothing; a Txn's first Commit or
//     Abort takes effect, later calls do nothing;
//   - a sink that is a sink.EachEnqueuer decides each event of a batch on
//     its own: the count it returns is the events it admitted, each
//     refusal wraps sink.ErrRejected, refused events never come out and
//     hold no credit;
//   - after Close, enqueues fail with an error wrapping sink.ErrClosed;
//   - Len counts the accepted events waiting (if Harness.LenExact);
//   - under a concurrency limit (Limiter), every admitted event gets
//     exactly one Done or Cancel, whatever happens to it (handled, failed,
//     refused by the sink after the predicate admitted it, aborted,
//     refused after Close), also with concurrent producers, so the limit's
//     in-flight count is back to 0 once every event is through.
//
// What it does not check: ordering beyond "refused events never come
// out", throughput, and what a sink does with events after Close (it
// drains them or not, as Harness says).
package sinktest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// Harness is one fresh sink under test and what the suite needs to drive
// it. Sink and Consume are required.
type Harness struct {
	// Sink is the sink under test: new, empty, with no predicate.
	Sink sink.Sink
	// Consume waits until an accepted event comes out of the sink and
	// has it handled successfully, as the sink's consumer would (a
	// queue's: dequeue it and report it done; a remote sink's: the
	// replica's handler ran). It returns the event, or false when none
	// came within a few seconds (the suite then fails).
	Consume func() (sink.Event, bool)
	// Fail is Consume with the event's handling failing (a handler
	// error). Nil: the suite consumes with Consume only.
	Fail func() (sink.Event, bool)
	// Close closes the sink: later enqueues must fail with an error
	// wrapping ClosedErr. Nil: the close checks are skipped.
	Close func()
	// ClosedErr is what enqueues after Close wrap (nil: sink.ErrClosed).
	ClosedErr error
	// ConsumeAfterClose: events accepted before Close still come out
	// and a Txn prepared before Close can be settled after it (a queue
	// drains); otherwise the suite consumes every accepted event and
	// settles its Txn before it calls Close.
	ConsumeAfterClose bool
	// Event returns the suite's i-th event (nil: i itself). Every i is
	// used once per test; the events must compare equal (==) after
	// crossing the sink, and distinct i must give distinct events.
	Event func(i int) sink.Event
	// NoTxn: Prepare always refuses, with an error wrapping
	// sink.ErrRejected (a remote reference sink). The transaction checks
	// then check only that. Avoid it in a new sink: every method of a
	// Sink should mean something.
	NoTxn bool
	// LenExact: Len counts the accepted events not consumed yet, at
	// once (a local queue). Otherwise Len is only called.
	LenExact bool
	// Limit, if set, makes a concurrency limit of another
	// implementation (enqueuepred's counter, say) for the credit tests,
	// beside the suite's own Limiter: it returns the predicate and a
	// function reporting how many events it holds credit for.
	Limit func(limit int) (p sink.Predicate, inFlight func() int)
}

// Run runs the conformance suite, one subtest per property, each on a
// fresh Harness from mk (called inside the subtest: register cleanups
// with its t).
func Run(t *testing.T, mk func(t *testing.T) Harness) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"Predicate", testPredicate},
		{"Reject", testReject},
		{"EnqueueMany", testEnqueueMany},
		{"EnqueueEach", testEnqueueEach},
		{"Txn", testTxn},
		{"Len", testLen},
		{"Credit", testCredit},
		{"Failures", testFailures},
		{"Close", testClose},
		{"Concurrent", testConcurrent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &harness{Harness: mk(t), t: t}
			if h.Sink == nil || h.Consume == nil {
				t.Fatal("sinktest: Harness needs Sink and Consume")
			}
			tt.fn(t, h)
		})
	}
}

// harness adds the suite's bookkeeping to a Harness.
type harness struct {
	Harness
	t    *testing.T
	next int
}

// ev returns a new event.
func (h *harness) ev() sink.Event {
	h.next++
	if h.Event != nil {
		return h.Event(h.next)
	}
	return h.next
}

func (h *harness) evs(n int) []sink.Event {
	out := make([]sink.Event, n)
	for i := range out {
		out[i] = h.ev()
	}
	return out
}

// consume takes n events out and checks each is one of want (and each
// comes once); fail selects Fail for every other event when set.
func (h *harness) consume(want []sink.Event, fail bool) {
	h.t.Helper()
	left := map[sink.Event]int{}
	for _, e := range want {
		left[e]++
	}
	for i := range want {
		take := h.Consume
		if fail && h.Fail != nil && i%2 == 1 {
			take = h.Fail
		}
		e, ok := take()
		if !ok {
			h.t.Fatalf("sinktest: accepted event %d of %d never came out of the sink", i+1, len(want))
		}
		if left[e] == 0 {
			h.t.Fatalf("sinktest: event %v came out of the sink, but it was refused or came out already", e)
		}
		left[e]--
	}
}

// marker enqueues one more event and checks it is the next to come out:
// nothing refused is left in the sink ahead of it.
func (h *harness) marker() {
	h.t.Helper()
	m := h.ev()
	if err := h.Sink.Enqueue(m); err != nil {
		h.t.Fatalf("sinktest: marker refused: %v", err)
	}
	e, ok := h.Consume()
	if !ok || e != m {
		h.t.Fatalf("sinktest: got %v (%v) out of the sink, want the marker %v: a refused event was kept", e, ok, m)
	}
}

// limiters returns the suite's Limiter and, if the harness has one, its
// other concurrency limit, each with a check that it holds no credit.
func (h *harness) limiters(limit int) []namedLimit {
	l := NewLimiter(limit)
	out := []namedLimit{{"Limiter", l, func() int { return int(l.InFlight()) }, l}}
	if h.Limit != nil {
		p, in := h.Limit(limit)
		out = append(out, namedLimit{sink.PredicateName(p), p, in, nil})
	}
	return out
}

type namedLimit struct {
	name     string
	p        sink.Predicate
	inFlight func() int
	tracker  *Limiter // nil: not the suite's
}

// settled waits until l holds no credit, and checks the suite's
// Limiter saw every event completed exactly once.
func settled(t *testing.T, l namedLimit) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.inFlight() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("sinktest: %s: %d events still hold credit after every event was handled, refused or aborted (a leak: some admitted event got no Done or Cancel)", l.name, l.inFlight())
		}
		time.Sleep(time.Millisecond)
	}
	if l.tracker != nil {
		if err := l.tracker.Err(); err != nil {
			t.Fatalf("sinktest: %v", err)
		}
	}
}

func testPredicate(t *testing.T, h *harness) {
	s := h.Sink
	if p := s.Predicate(); p != nil {
		t.Fatalf("a new sink has predicate %v, want nil", p)
	}
	l := NewLimiter(10)
	s.SetPredicate(l)
	if s.Predicate() != l {
		t.Fatal("Predicate does not return what SetPredicate set")
	}
	// Bound to the sink itself, or to the sink a wrapper forwards to
	// (a stage's sink binds its queue).
	if b := l.Bound(); b == nil || b.Len() != s.Len() {
		t.Fatalf("SetPredicate bound the predicate to %T, want the sink (sink.Binder)", b)
	}
	s.SetPredicate(nil)
	if p := s.Predicate(); p != nil {
		t.Fatalf("after SetPredicate(nil), Predicate returns %v", p)
	}
	e := h.ev()
	if err := s.Enqueue(e); err != nil {
		t.Fatalf("no predicate: %v", err)
	}
	h.consume([]sink.Event{e}, false)
}

func testReject(t *testing.T, h *harness) {
	s := h.Sink
	no := &refuser{}
	s.SetPredicate(no)
	err := s.Enqueue(h.ev())
	var re *sink.RejectError
	if !errors.Is(err, sink.ErrRejected) || !errors.As(err, &re) || re.Predicate != no.Name() {
		t.Fatalf("Enqueue refused by the predicate returned %v, want a *sink.RejectError wrapping sink.ErrRejected naming predicate %q", err, no.Name())
	}
	if s.EnqueueLossy(h.ev()) {
		t.Fatal("EnqueueLossy reported true for a refused event")
	}
	if err := s.EnqueueMany(h.evs(2)); !errors.Is(err, sink.ErrRejected) {
		t.Fatalf("EnqueueMany refused by the predicate: %v", err)
	}
	if txn, err := s.Prepare(h.evs(2)); !errors.Is(err, sink.ErrRejected) || txn != nil {
		t.Fatalf("Prepare refused by the predicate: %v, %v", txn, err)
	}
	s.SetPredicate(nil)
	h.marker()
}

func testEnqueueMany(t *testing.T, h *harness) {
	for _, l := range h.limiters(3) {
		t.Run(l.name, func(t *testing.T) {
			h.Sink.SetPredicate(l.p)
			if err := h.Sink.EnqueueMany(h.evs(4)); !errors.Is(err, sink.ErrRejected) {
				t.Fatalf("4 events under a limit of 3: %v", err)
			}
			if n := l.inFlight(); n != 0 {
				t.Fatalf("a refused EnqueueMany left %d events holding credit", n)
			}
			es := h.evs(3)
			if err := h.Sink.EnqueueMany(es); err != nil {
				t.Fatalf("3 events under a limit of 3: %v", err)
			}
			h.consume(es, false)
			settled(t, l)
			if err := h.Sink.EnqueueMany(nil); err != nil {
				t.Fatalf("EnqueueMany(nil): %v", err)
			}
			h.Sink.SetPredicate(nil)
			h.marker()
		})
	}
}

func testTxn(t *testing.T, h *harness) {
	if h.NoTxn {
		l := NewLimiter(4)
		h.Sink.SetPredicate(l)
		if txn, err := h.Sink.Prepare(h.evs(2)); txn != nil || !errors.Is(err, sink.ErrRejected) {
			t.Fatalf("NoTxn: Prepare returned %v, %v; want a rejection", txn, err)
		}
		settled(t, namedLimit{"Limiter", l, func() int { return int(l.InFlight()) }, l})
		return
	}
	for _, l := range h.limiters(4) {
		t.Run(l.name, func(t *testing.T) {
			s := h.Sink
			s.SetPredicate(l.p)
			aborted, err := s.Prepare(h.evs(2))
			if err != nil {
				t.Fatal(err)
			}
			aborted.Abort()
			aborted.Commit() // after Abort: nothing
			aborted.Abort()
			es := h.evs(2)
			committed, err := s.Prepare(es)
			if err != nil {
				t.Fatal(err)
			}
			committed.Commit()
			committed.Commit() // nothing more
			committed.Abort()
			h.consume(es, false)
			settled(t, l)
			s.SetPredicate(nil)
			h.marker()
		})
	}
}

func testLen(t *testing.T, h *harness) {
	s := h.Sink
	n := s.Len()
	if !h.LenExact {
		return
	}
	if n != 0 {
		t.Fatalf("a new sink has Len %d", n)
	}
	es := h.evs(3)
	for _, e := range es {
		if err := s.Enqueue(e); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Len(); got != 3 {
		t.Fatalf("Len = %d after 3 accepted events", got)
	}
	s.SetPredicate(&refuser{})
	_ = s.Enqueue(h.ev())
	if got := s.Len(); got != 3 {
		t.Fatalf("Len = %d after a refusal, want 3", got)
	}
	s.SetPredicate(nil)
	h.consume(es, false)
	if got := s.Len(); got != 0 {
		t.Fatalf("Len = %d once every event came out", got)
	}
}

// testCredit offers more events than the limit admits, one at a time and
// in every way, and consumes them: the limit must end holding nothing.
func testCredit(t *testing.T, h *harness) {
	for _, l := range h.limiters(4) {
		t.Run(l.name, func(t *testing.T) {
			s := h.Sink
			s.SetPredicate(l.p)
			var accepted []sink.Event
			for i := 0; i < 10; i++ {
				e := h.ev()
				var err error
				switch i % 3 {
				case 0:
					err = s.Enqueue(e)
				case 1:
					if !s.EnqueueLossy(e) {
						err = sink.ErrRejected
					}
				case 2:
					var txn sink.Txn
					if txn, err = s.Prepare([]sink.Event{e}); err == nil {
						txn.Commit()
					}
				}
				if err != nil && !errors.Is(err, sink.ErrRejected) {
					t.Fatalf("event %d: %v, want nil or a rejection", i, err)
				}
				if err == nil {
					accepted = append(accepted, e)
				}
			}
			if len(accepted) == 0 {
				t.Fatal("a limit of 4 admitted nothing")
			}
			h.consume(accepted, false)
			settled(t, l)
		})
	}
}

// testEnqueueEach: a sink.EachEnqueuer decides a batch each event on its
// own, under a concurrency limit of 4 with nothing consumed: what it
// admits comes out, what it refuses does not and holds no credit.
func testEnqueueEach(t *testing.T, h *harness) {
	each, ok := h.Sink.(sink.EachEnqueuer)
	if !ok {
		t.Skipf("%T is not a sink.EachEnqueuer", h.Sink)
	}
	for _, l := range h.limiters(4) {
		t.Run(l.name, func(t *testing.T) {
			h.Sink.SetPredicate(l.p)
			es := h.evs(10)
			errs := make([]error, len(es))
			added := each.EnqueueEach(es, errs)
			var accepted []sink.Event
			for i, err := range errs {
				switch {
				case err == nil:
					accepted = append(accepted, es[i])
				case !errors.Is(err, sink.ErrRejected):
					t.Fatalf("event %d: %v, want nil or a rejection", i, err)
				}
			}
			if added != len(accepted) {
				t.Fatalf("EnqueueEach reported %d added, its verdicts admit %d", added, len(accepted))
			}
			if added == 0 || added == len(es) {
				t.Fatalf("a limit of 4 admitted %d of %d events", added, len(es))
			}
			h.consume(accepted, false)
			h.Sink.SetPredicate(nil)
			h.marker()
			settled(t, l)
		})
	}
}

// testFailures has every other event's handling fail: a failed event is
// completed like a handled one.
func testFailures(t *testing.T, h *harness) {
	for _, l := range h.limiters(8) {
		t.Run(l.name, func(t *testing.T) {
			h.Sink.SetPredicate(l.p)
			es := h.evs(6)
			for _, e := range es {
				if err := h.Sink.Enqueue(e); err != nil {
					t.Fatal(err)
				}
			}
			h.consume(es, true)
			settled(t, l)
		})
	}
}

func testClose(t *testing.T, h *harness) {
	if h.Close == nil {
		t.Skip("the harness cannot close its sink")
	}
	want := h.ClosedErr
	if want == nil {
		want = sink.ErrClosed
	}
	l := h.limiters(8)[0]
	s := h.Sink
	s.SetPredicate(l.p)
	es := h.evs(3)
	for _, e := range es {
		if err := s.Enqueue(e); err != nil {
			t.Fatal(err)
		}
	}
	txn := sink.Txn(noTxn{})
	if !h.NoTxn {
		var err error
		if txn, err = s.Prepare(h.evs(2)); err != nil {
			t.Fatal(err)
		}
	}
	if !h.ConsumeAfterClose {
		h.consume(es, false)
		txn.Abort()
	}
	h.Close()
	txn.Abort() // after Close, for a sink that drains (a queue)
	if err := s.Enqueue(h.ev()); !errors.Is(err, want) {
		t.Fatalf("Enqueue after Close: %v, want an error wrapping %v", err, want)
	}
	if err := s.EnqueueMany(h.evs(2)); !errors.Is(err, want) {
		t.Fatalf("EnqueueMany after Close: %v, want an error wrapping %v", err, want)
	}
	if s.EnqueueLossy(h.ev()) {
		t.Fatal("EnqueueLossy after Close reported true")
	}
	if txn, err := s.Prepare(h.evs(1)); err == nil {
		// a sink that cannot tell at Prepare (a durable stream) must
		// refuse at Commit, and give the credit back
		txn.Commit()
	}
	if h.ConsumeAfterClose {
		h.consume(es, false)
	}
	settled(t, l)
}

// testConcurrent has producers enqueue in every way at once under a small
// limit while events are consumed and fail: no credit may leak.
func testConcurrent(t *testing.T, h *harness) {
	const producers, each = 4, 60
	for _, l := range h.limiters(6) {
		t.Run(l.name, func(t *testing.T) {
			s := h.Sink
			s.SetPredicate(l.p)
			var (
				mu       sync.Mutex
				accepted = map[sink.Event]bool{}
				out      = map[sink.Event]int{}
				pending  atomic.Int64
			)
			evs := make([][]sink.Event, producers)
			for i := range evs {
				evs[i] = h.evs(each)
			}
			var wg sync.WaitGroup
			for g := 0; g < producers; g++ {
				wg.Add(1)
				go func(mine []sink.Event) {
					defer wg.Done()
					for i := 0; i < len(mine); {
						var took []sink.Event
						var err error
						switch i % 5 {
						case 0:
							took = mine[i : i+1]
							err = s.Enqueue(mine[i])
						case 1:
							took = mine[i : i+1]
							if !s.EnqueueLossy(mine[i]) {
								err = sink.ErrRejected
							}
						case 2:
							took = mine[i:min(i+2, len(mine))]
							err = s.EnqueueMany(took)
						case 3:
							took = mine[i:min(i+2, len(mine))]
							var txn sink.Txn
							if txn, err = s.Prepare(took); err == nil {
								txn.Commit()
							}
						case 4:
							took = mine[i : i+1]
							if txn, err := s.Prepare(took); err == nil {
								txn.Abort()
							}
							err = sink.ErrRejected // aborted: never comes out
						}
						i += len(took)
						if err != nil && !errors.Is(err, sink.ErrRejected) {
							t.Errorf("enqueue: %v, want nil or a rejection", err)
							return
						}
						if err == nil {
							mu.Lock()
							for _, e := range took {
								accepted[e] = true
							}
							mu.Unlock()
							pending.Add(int64(len(took)))
						}
					}
				}(evs[g])
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			// Consume as the producers go (the limit only frees credit
			// as events are handled), then what is left.
			consumed := 0
			take := func() {
				get := h.Consume
				if h.Fail != nil && consumed%3 == 2 {
					get = h.Fail
				}
				e, ok := get()
				if !ok {
					t.Fatalf("sinktest: an accepted event never came out (%d consumed)", consumed)
				}
				// The producer may not have recorded e yet: compare
				// once every producer is done.
				mu.Lock()
				out[e]++
				mu.Unlock()
				consumed++
				pending.Add(-1)
			}
			for {
				select {
				case <-done:
				default:
					if pending.Load() > 0 {
						take()
					} else {
						time.Sleep(50 * time.Microsecond)
					}
					continue
				}
				break
			}
			for pending.Load() > 0 {
				take()
			}
			if consumed == 0 {
				t.Fatal("nothing was accepted")
			}
			for e, n := range out {
				if n != 1 || !accepted[e] {
					t.Fatalf("sinktest: event %v came out %d times, accepted %v", e, n, accepted[e])
				}
			}
			if len(out) != len(accepted) {
				t.Fatalf("sinktest: %d events accepted, %d came out", len(accepted), len(out))
			}
			settled(t, l)
		})
	}
}

// noTxn stands for a transaction a NoTxn sink could not prepare.
type noTxn struct{}

func (noTxn) Commit() {}
func (noTxn) Abort()  {}

// refuser refuses everything.
type refuser struct{}

func (*refuser) Accept(sink.Event) bool { return false }
func (*refuser) Name() string           { return "sinktest.refuser" }

// Limiter is a concurrency limit that checks the admission contract: it
// admits at most its limit of events at a time, gets each back through
// Done or Cancel, and records every event completed that it did not
// admit or completed twice (Err). It is a sink.Binder, sink.Completer
// and sink.Canceler; use it to test a sink by hand.
type Limiter struct {
	limit int64
	n     atomic.Int64

	mu    sync.Mutex
	held  map[sink.Event]int
	errs  []error
	bound sink.Sink
}

var (
	_ sink.Binder    = (*Limiter)(nil)
	_ sink.Completer = (*Limiter)(nil)
	_ sink.Canceler  = (*Limiter)(nil)
)

// NewLimiter returns a Limiter admitting at most limit events at a time.
func NewLimiter(limit int) *Limiter {
	return &Limiter{limit: int64(limit), held: map[sink.Event]int{}}
}

// Name implements sink.Namer.
func (l *Limiter) Name() string { return "sinktest.Limiter" }

// Accept admits e if fewer than the limit are held.
func (l *Limiter) Accept(e sink.Event) bool {
	if l.n.Add(1) > l.limit {
		l.n.Add(-1)
		return false
	}
	l.mu.Lock()
	l.held[e]++
	l.mu.Unlock()
	return true
}

// Done gives e's credit back (sink.Completer).
func (l *Limiter) Done(e sink.Event, _, _ time.Duration) { l.release(e, "Done") }

// Cancel gives e's credit back (sink.Canceler).
func (l *Limiter) Cancel(e sink.Event) { l.release(e, "Cancel") }

func (l *Limiter) release(e sink.Event, how string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[e] == 0 {
		l.errs = append(l.errs, fmt.Errorf("%s(%v): the event holds no credit (never admitted, or completed twice)", how, e))
		return
	}
	if l.held[e]--; l.held[e] == 0 {
		delete(l.held, e)
	}
	l.n.Add(-1)
}

// Bind records the sink (sink.Binder).
func (l *Limiter) Bind(s sink.Sink) {
	l.mu.Lock()
	l.bound = s
	l.mu.Unlock()
}

// Bound returns the sink l was bound to, or nil.
func (l *Limiter) Bound() sink.Sink {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bound
}

// InFlight returns how many admitted events have not been completed.
func (l *Limiter) InFlight() int64 { return l.n.Load() }

// Err reports the completions that broke the contract, or nil.
func (l *Limiter) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return errors.Join(l.errs...)
}

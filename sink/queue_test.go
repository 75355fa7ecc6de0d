package sink_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
	"github.com/sandstorm-go/sandstorm/sink"
)

func drain(q *sink.Queue) []sink.Event {
	var out []sink.Event
	buf := make([]sink.Event, 7)
	for {
		n := q.Dequeue(buf, nil)
		if n == 0 {
			return out
		}
		out = append(out, buf[:n]...)
	}
}

func TestQueueFIFOAndGrowth(t *testing.T) {
	for _, capacity := range []int{0, -1, 5, 16, 1000} {
		q := sink.NewQueue(capacity)
		n := 100
		if capacity > 0 {
			n = capacity
		}
		for i := 0; i < n; i++ {
			if err := q.Enqueue(i); err != nil {
				t.Fatalf("cap %d: enqueue %d: %v", capacity, i, err)
			}
		}
		if q.Len() != n {
			t.Fatalf("cap %d: Len = %d, want %d", capacity, q.Len(), n)
		}
		got := drain(q)
		for i, e := range got {
			if e != i {
				t.Fatalf("cap %d: event %d = %v", capacity, i, e)
			}
		}
		if len(got) != n || q.Len() != 0 {
			t.Fatalf("cap %d: drained %d, Len %d", capacity, len(got), q.Len())
		}
	}
}

func TestQueueWrapAround(t *testing.T) {
	q := sink.NewQueue(0)
	next, want := 0, 0
	buf := make([]sink.Event, 3)
	for round := 0; round < 50; round++ {
		for i := 0; i < 5+round%7; i++ {
			if err := q.Enqueue(next); err != nil {
				t.Fatal(err)
			}
			next++
		}
		n := q.Dequeue(buf, nil)
		for _, e := range buf[:n] {
			if e != want {
				t.Fatalf("got %v want %d", e, want)
			}
			want++
		}
	}
	for _, e := range drain(q) {
		if e != want {
			t.Fatalf("got %v want %d", e, want)
		}
		want++
	}
	if want != next {
		t.Fatalf("lost events: dequeued %d of %d", want, next)
	}
}

func TestEnqueueRejections(t *testing.T) {
	even := sink.PredicateFunc(func(e sink.Event) bool { return e.(int)%2 == 0 })
	tests := []struct {
		name      string
		capacity  int
		pred      sink.Predicate
		closed    bool
		fill      int
		event     int
		want      error
		predicate string
	}{
		{name: "accepts", capacity: 2, event: 1},
		{name: "full", capacity: 2, fill: 2, event: 2, want: sink.ErrRejected},
		{name: "predicate", capacity: 0, pred: even, event: 3, want: sink.ErrRejected, predicate: "sink.PredicateFunc"},
		{name: "predicate accepts", pred: even, event: 4},
		{name: "closed", closed: true, event: 2, want: sink.ErrClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := sink.NewNamedQueue("S", tt.capacity)
			for i := 0; i < tt.fill; i++ {
				if err := q.Enqueue(0); err != nil {
					t.Fatal(err)
				}
			}
			q.SetPredicate(tt.pred)
			if tt.closed {
				q.Close()
			}
			err := q.Enqueue(tt.event)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Enqueue = %v, want %v", err, tt.want)
			}
			var rej *sink.RejectError
			if errors.As(err, &rej) {
				if rej.Sink != "S" || rej.Predicate != tt.predicate {
					t.Fatalf("RejectError = %+v", rej)
				}
			}
			if ok := q.EnqueueLossy(tt.event); ok != (tt.want == nil) {
				t.Fatalf("EnqueueLossy = %v", ok)
			}
			st := q.Stats()
			rejected := st.RejectedFull + st.RejectedPredicate + st.RejectedClosed
			if tt.want != nil && (rejected != 2 || st.Dropped != 1) {
				t.Fatalf("stats %+v: want 2 rejected, 1 dropped", st)
			}
		})
	}
}

// countingPredicate takes a credit per accepted event and gives it back on
// Cancel, like a concurrency counter.
type countingPredicate struct {
	limit, inUse int
	cancels      int
}

func (c *countingPredicate) Accept(sink.Event) bool {
	if c.inUse >= c.limit {
		return false
	}
	c.inUse++
	return true
}
func (c *countingPredicate) Cancel(sink.Event) { c.inUse--; c.cancels++ }

func TestEnqueueManyAllOrNothing(t *testing.T) {
	q := sink.NewQueue(5)
	if err := q.EnqueueMany([]sink.Event{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if err := q.EnqueueMany([]sink.Event{4, 5, 6}); !errors.Is(err, sink.ErrRejected) {
		t.Fatalf("over capacity: %v", err)
	}
	if q.Len() != 3 {
		t.Fatalf("partial enqueue: Len = %d", q.Len())
	}
	// A predicate refusing part of a batch refuses the batch and returns
	// the credit it took for the accepted part.
	p := &countingPredicate{limit: 3}
	q2 := sink.NewQueue(0)
	q2.SetPredicate(p)
	if err := q2.EnqueueMany([]sink.Event{1, 2, 3, 4}); !errors.Is(err, sink.ErrRejected) {
		t.Fatalf("predicate: %v", err)
	}
	if q2.Len() != 0 || p.inUse != 0 || p.cancels != 3 {
		t.Fatalf("Len %d inUse %d cancels %d", q2.Len(), p.inUse, p.cancels)
	}
	if err := q2.EnqueueMany(nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
}

func TestTxnCommitAbort(t *testing.T) {
	q := sink.NewQueue(4)
	txn, err := q.Prepare([]sink.Event{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if q.Len() != 0 {
		t.Fatalf("prepared events visible: Len %d", q.Len())
	}
	// the reservation holds capacity
	if err := q.EnqueueMany([]sink.Event{"x", "y"}); !errors.Is(err, sink.ErrRejected) {
		t.Fatalf("reservation not honoured: %v", err)
	}
	if err := q.Enqueue("x"); err != nil {
		t.Fatal(err)
	}
	txn.Commit()
	txn.Commit() // idempotent
	txn.Abort()  // no effect after commit
	got := drain(q)
	want := []sink.Event{"x", "a", "b", "c"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v want %v", got, want)
		}
	}

	p := &countingPredicate{limit: 10}
	q.SetPredicate(p)
	txn, err = q.Prepare([]sink.Event{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	txn.Abort()
	txn.Commit()
	if q.Len() != 0 || p.inUse != 0 {
		t.Fatalf("abort leaked: Len %d credit %d", q.Len(), p.inUse)
	}
	if err := q.EnqueueMany([]sink.Event{1, 2, 3, 4}); err != nil {
		t.Fatalf("capacity not returned by abort: %v", err)
	}
}

func TestCloseDrainsAndWaitsForTxn(t *testing.T) {
	q := sink.NewQueue(0)
	_ = q.Enqueue(1)
	txn, _ := q.Prepare([]sink.Event{2})
	q.Close()
	q.Close()
	if err := q.Enqueue(3); !errors.Is(err, sink.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	select {
	case <-q.Closed():
	default:
		t.Fatal("Closed channel not closed")
	}
	drain(q)
	if q.Drained() {
		t.Fatal("drained while a prepared transaction is open")
	}
	txn.Commit()
	if got := drain(q); len(got) != 1 || got[0] != 2 {
		t.Fatalf("committed after close: %v", got)
	}
	if !q.Drained() {
		t.Fatal("not drained")
	}
}

func TestDequeueStampsAndDiscard(t *testing.T) {
	q := sink.NewQueue(0)
	before := sink.Nanotime()
	_ = q.EnqueueMany([]sink.Event{1, 2})
	evs, stamps := make([]sink.Event, 1), make([]int64, 1)
	if n := q.Dequeue(evs, stamps); n != 1 || stamps[0] < before || stamps[0] > sink.Nanotime() {
		t.Fatalf("n %d stamp %d", n, stamps[0])
	}
	// Discarded events go back to the predicate that admitted them: here
	// event 2 came in before any predicate, 3 and 4 under p.
	p := &countingPredicate{limit: 10}
	q.SetPredicate(p)
	_ = q.EnqueueMany([]sink.Event{3, 4})
	if got := q.Discard(); len(got) != 3 || got[0] != 2 || p.inUse != 0 || p.cancels != 2 {
		t.Fatalf("Discard = %v, credit %d, cancels %d; want [2 3 4], 0, 2", got, p.inUse, p.cancels)
	}
}

// A transaction prepared under one predicate and settled after another
// replaced it completes or is cancelled on the one that admitted it; so
// do queued events discarded after a replacement.
func TestTxnAndDiscardFollowReplacements(t *testing.T) {
	q := sink.NewQueue(0)
	a, b := &countingPredicate{limit: 10}, &countingPredicate{limit: 10}
	q.SetPredicate(a)
	aborted, err := q.Prepare([]sink.Event{"a1"})
	if err != nil {
		t.Fatal(err)
	}
	committed, err := q.Prepare([]sink.Event{"a2"})
	if err != nil {
		t.Fatal(err)
	}
	_ = q.Enqueue("a3")
	q.SetPredicate(b)
	_ = q.Enqueue("b1")
	aborted.Abort()
	committed.Commit()
	if a.inUse != 2 || b.inUse != 1 {
		t.Fatalf("after Abort: a holds %d (want 2: a2, a3), b %d (want 1)", a.inUse, b.inUse)
	}
	evs, stamps := make([]sink.Event, 8), make([]int64, 8)
	n := q.Dequeue(evs[:1], stamps[:1]) // a3
	if n != 1 || evs[0] != "a3" {
		t.Fatalf("dequeued %v", evs[:n])
	}
	got := q.Discard() // b1, then a2 (committed after b1)
	if len(got) != 2 || a.inUse != 1 || b.inUse != 0 {
		t.Fatalf("Discard %v: a holds %d (want 1: a3 in service), b %d (want 0)", got, a.inUse, b.inUse)
	}
}

func TestReadyToken(t *testing.T) {
	q := sink.NewQueue(0)
	select {
	case <-q.Ready():
		t.Fatal("token on empty queue")
	default:
	}
	_ = q.Enqueue(1)
	select {
	case <-q.Ready():
	default:
		t.Fatal("no token after enqueue")
	}
	_ = q.EnqueueMany([]sink.Event{2, 3})
	<-q.Ready()
	buf := make([]sink.Event, 1)
	q.Dequeue(buf, nil) // leaves events behind: passes the token on
	select {
	case <-q.Ready():
	default:
		t.Fatal("token not passed on")
	}
}

// TestConcurrentNoLoss runs producers and consumers at once and checks
// every accepted event comes out exactly once and every refused one was
// reported to its producer.
func TestConcurrentNoLoss(t *testing.T) {
	const producers, perProducer, consumers = 4, 25000, 3
	q := sink.NewQueue(256)
	var accepted, rejected atomic.Int64
	seen := make([]atomic.Int32, producers*perProducer)
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < perProducer; i++ {
				err := q.Enqueue(p*perProducer + i)
				switch {
				case err == nil:
					accepted.Add(1)
				case errors.Is(err, sink.ErrRejected):
					rejected.Add(1)
				default:
					t.Error(err)
				}
			}
		}(p)
	}
	var cwg sync.WaitGroup
	for c := 0; c < consumers; c++ {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			buf := make([]sink.Event, 16)
			for {
				n := q.Dequeue(buf, nil)
				for _, e := range buf[:n] {
					seen[e.(int)].Add(1)
				}
				if n == 0 {
					if q.Drained() {
						return
					}
					select {
					case <-q.Ready():
					case <-q.Closed():
						// keep draining until Drained
					}
				}
			}
		}()
	}
	wg.Wait()
	q.Close()
	cwg.Wait()
	var got int64
	for i := range seen {
		switch seen[i].Load() {
		case 0:
		case 1:
			got++
		default:
			t.Fatalf("event %d seen %d times", i, seen[i].Load())
		}
	}
	if got != accepted.Load() || accepted.Load()+rejected.Load() != producers*perProducer {
		t.Fatalf("accepted %d rejected %d delivered %d", accepted.Load(), rejected.Load(), got)
	}
	st := q.Stats()
	if st.Enqueued != uint64(accepted.Load()) || st.RejectedFull != uint64(rejected.Load()) || st.Dequeued != uint64(got) {
		t.Fatalf("stats %+v", st)
	}
}

func TestEnqueueWait(t *testing.T) {
	q := sink.NewQueue(1)
	_ = q.Enqueue(0)
	done := make(chan error, 1)
	go func() { done <- sink.EnqueueWait(context.Background(), q, 1) }()
	// The waiter cannot finish until room appears; make room.
	buf := make([]sink.Event, 1)
	for q.Dequeue(buf, nil) == 0 {
	}
	if err := <-done; err != nil {
		t.Fatalf("EnqueueWait: %v", err)
	}
	if got := drain(q); len(got) != 1 || got[0] != 1 {
		t.Fatalf("queue holds %v", got)
	}

	// A context that ends reports both the context error and the rejection.
	_ = q.Enqueue(2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := sink.EnqueueWait(ctx, q, 3)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, sink.ErrRejected) {
		t.Fatalf("cancelled wait: %v", err)
	}
	q.Close()
	if err := sink.EnqueueWait(context.Background(), q, 4); !errors.Is(err, sink.ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
}

// TestCommitAfterAbandon: a transaction committed after the runtime gave
// up on a closed queue (Discard) is removed and cancelled, not left in a
// queue nobody drains; on an open queue Discard does not stop later
// commits.
func TestCommitAfterAbandon(t *testing.T) {
	for _, closed := range []bool{false, true} {
		t.Run(fmt.Sprintf("closed=%v", closed), func(t *testing.T) {
			q := sink.NewQueue(0)
			p := &countingPredicate{limit: 10}
			q.SetPredicate(p)
			txn, err := q.Prepare([]sink.Event{1, 2})
			if err != nil {
				t.Fatal(err)
			}
			if closed {
				q.Close()
			}
			q.Discard()
			txn.Commit()
			if closed {
				if q.Len() != 0 || q.Pending() != 0 || p.inUse != 0 || q.Stats().Removed != 2 {
					t.Fatalf("len %d pending %d credits held %d stats %+v", q.Len(), q.Pending(), p.inUse, q.Stats())
				}
				if !q.Drained() {
					t.Fatal("abandoned queue not drained")
				}
				return
			}
			if q.Len() != 2 || p.inUse != 2 {
				t.Fatalf("open queue: len %d credits held %d", q.Len(), p.inUse)
			}
		})
	}
}

// namedCompleter is a Completer predicate that admits everything.
type namedCompleter string

func (namedCompleter) Accept(sink.Event) bool                        { return true }
func (namedCompleter) Done(sink.Event, time.Duration, time.Duration) {}

// Events complete on the predicate that admitted them, even after it was
// replaced; events admitted with no Completer installed complete nowhere.
func TestCompleterAtFollowsReplacements(t *testing.T) {
	q := sink.NewQueue(0)
	a, b := namedCompleter("a"), namedCompleter("b")
	_ = q.Enqueue("none-1") // no predicate yet
	q.SetPredicate(a)
	_ = q.Enqueue("a-1")
	_ = q.EnqueueMany([]sink.Event{"a-2", "a-3"})
	q.SetPredicate(b)
	_ = q.Enqueue("b-1")
	txn, err := q.Prepare([]sink.Event{"b-2"})
	if err != nil {
		t.Fatal(err)
	}
	txn.Commit()
	q.SetPredicate(sink.PredicateFunc(func(sink.Event) bool { return true }))
	for i := 0; i < 20; i++ { // some of them stamped (sampled), none owed
		_ = q.Enqueue("plain")
	}
	q.SetPredicate(nil)
	_ = q.Enqueue("nil-1")
	if !sinkrt.Of(q).MayComplete() {
		t.Fatal("MayComplete is false with completions owed to a and b")
	}
	evs, stamps := make([]sink.Event, 64), make([]int64, 64)
	n := q.Dequeue(evs, stamps)
	for i, e := range evs[:n] {
		var want sink.Completer
		switch s := e.(string); {
		case s[0] == 'a':
			want = a
		case s[0] == 'b':
			want = b
		}
		if got := sinkrt.Of(q).CompleterAt(stamps[i]); got != want {
			t.Errorf("%v (stamp %d) completes on %v, want %v", e, stamps[i], got, want)
		}
	}
}

// nonRejectable is an event a full queue still admits.
type nonRejectable string

func (nonRejectable) NonRejectable() bool { return true }

func TestNonRejectableBypassesCapacity(t *testing.T) {
	q := sink.NewNamedQueue("Q", 1)
	if err := q.Enqueue("first"); err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue("second"); !errors.Is(err, sink.ErrRejected) {
		t.Fatalf("ordinary event on a full queue: %v, want ErrRejected", err)
	}
	if err := q.Enqueue(nonRejectable("teardown")); err != nil {
		t.Fatalf("non-rejectable event on a full queue: %v", err)
	}
	if err := q.EnqueueMany([]sink.Event{nonRejectable("t1"), nonRejectable("t2")}); err != nil {
		t.Fatalf("non-rejectable batch on a full queue: %v", err)
	}
	if err := q.EnqueueMany([]sink.Event{nonRejectable("t3"), "ordinary"}); !errors.Is(err, sink.ErrRejected) {
		t.Fatalf("mixed batch on a full queue: %v, want ErrRejected", err)
	}
	if got := q.Len(); got != 4 {
		t.Fatalf("Len = %d, want 4", got)
	}
	q.Close()
	if err := q.Enqueue(nonRejectable("late")); !errors.Is(err, sink.ErrClosed) {
		t.Fatalf("non-rejectable event on a closed queue: %v, want ErrClosed", err)
	}
}

// Replacing predicates many times while workers look up who admitted their
// events is race-free (run with -race): the history is cut, never
// rewritten.
func TestPredicateHistoryConcurrent(t *testing.T) {
	q := sink.NewQueue(0)
	q.SetPredicate(namedCompleter("first"))
	_ = q.Enqueue(1)
	evs, stamps := make([]sink.Event, 1), make([]int64, 1)
	q.Dequeue(evs, stamps)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 200; i++ {
			q.SetPredicate(namedCompleter(fmt.Sprint(i)))
		}
	}()
	for {
		select {
		case <-done:
			if got := sinkrt.Of(q).CompleterAt(stamps[0]); got != nil {
				t.Fatalf("an event admitted 200 replacements ago completes on %v, want nil (beyond the history)", got)
			}
			return
		default:
			sinkrt.Of(q).CompleterAt(stamps[0])
			sinkrt.Of(q).MayComplete()
		}
	}
}

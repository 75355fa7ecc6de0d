package sink_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
	"github.com/sandstorm-go/sandstorm/sink"
)

// credit is a concurrency limit that records its hooks: admitted events
// hold a credit until Done or Cancel gives it back.
type credit struct {
	limit    int64
	inFlight atomic.Int64
	done     atomic.Int64
	canceled atomic.Int64
	bound    atomic.Pointer[sink.Sink]
	name     string
}

func (c *credit) Accept(sink.Event) bool {
	if c.inFlight.Add(1) > c.limit {
		c.inFlight.Add(-1)
		return false
	}
	return true
}
func (c *credit) Done(sink.Event, time.Duration, time.Duration) { c.done.Add(1); c.inFlight.Add(-1) }
func (c *credit) Cancel(sink.Event)                             { c.canceled.Add(1); c.inFlight.Add(-1) }
func (c *credit) Bind(s sink.Sink)                              { c.bound.Store(&s) }
func (c *credit) Name() string                                  { return c.name }

// named is a Sink that is not a queue, to hold an Admission.
type named struct {
	sink.Sink
	adm sink.Admission
}

func (n *named) String() string                          { return "conn 1" }
func (n *named) SetPredicate(p sink.Predicate)           { n.adm.SetPredicate(n, p) }
func (n *named) Predicate() sink.Predicate               { return n.adm.Predicate() }
func (n *named) admit(e sink.Event) (sink.Ticket, error) { return n.adm.Admit(e) }

func TestAdmissionZeroValueAdmitsAll(t *testing.T) {
	var a sink.Admission
	tk, err := a.Admit(1)
	if err != nil || tk.Predicate() != nil {
		t.Fatalf("zero Admission: %v, %v", tk.Predicate(), err)
	}
	tk.Done(1, 0, 0) // completes nothing, must not panic
	tk.Cancel(1)
	if _, err := a.AdmitMany([]sink.Event{1, 2}); err != nil || a.Rejected() != 0 || a.Predicate() != nil {
		t.Fatal("zero Admission refused a batch")
	}
}

func TestAdmissionBindsRejectsCompletes(t *testing.T) {
	s := &named{}
	c := &credit{limit: 2, name: "counter"}
	s.SetPredicate(c)
	if b := c.bound.Load(); b == nil || *b != sink.Sink(s) {
		t.Fatal("SetPredicate did not bind the predicate to the sink first")
	}
	if s.Predicate() != c {
		t.Fatal("Predicate does not return the installed predicate")
	}
	t1, err1 := s.admit("a")
	t2, err2 := s.admit("b")
	_, err3 := s.admit("c")
	if err1 != nil || err2 != nil || err3 == nil {
		t.Fatalf("limit 2: %v %v %v", err1, err2, err3)
	}
	var re *sink.RejectError
	if !errors.Is(err3, sink.ErrRejected) || !errors.As(err3, &re) || re.Sink != "conn 1" || re.Predicate != "counter" {
		t.Fatalf("rejection %#v", err3)
	}
	if s.adm.Rejected() != 1 {
		t.Fatalf("Rejected = %d", s.adm.Rejected())
	}
	t1.Done("a", time.Millisecond, time.Millisecond)
	t2.Cancel("b")
	if c.inFlight.Load() != 0 || c.done.Load() != 1 || c.canceled.Load() != 1 {
		t.Fatalf("in flight %d, done %d, cancelled %d", c.inFlight.Load(), c.done.Load(), c.canceled.Load())
	}
}

func TestAdmissionAdmitManyAllOrNothing(t *testing.T) {
	var a sink.Admission
	c := &credit{limit: 3}
	a.SetPredicate(nil, c)
	if _, err := a.AdmitMany([]sink.Event{1, 2, 3, 4}); !errors.Is(err, sink.ErrRejected) {
		t.Fatalf("4 events under a limit of 3: %v", err)
	}
	if c.inFlight.Load() != 0 || a.Rejected() != 4 {
		t.Fatalf("refused batch left %d in flight, %d rejected", c.inFlight.Load(), a.Rejected())
	}
	tk, err := a.AdmitMany([]sink.Event{1, 2, 3})
	if err != nil || c.inFlight.Load() != 3 {
		t.Fatalf("3 events: %v, %d in flight", err, c.inFlight.Load())
	}
	for _, e := range []sink.Event{1, 2, 3} {
		tk.Done(e, 0, 0)
	}
	if c.inFlight.Load() != 0 {
		t.Fatalf("%d in flight", c.inFlight.Load())
	}
}

func TestAdmissionTicketFollowsReplacement(t *testing.T) {
	var a sink.Admission
	old, next := &credit{limit: 10}, &credit{limit: 10}
	a.SetPredicate(nil, old)
	tk, _ := a.Admit(1)
	a.SetPredicate(nil, next)
	tk2, _ := a.Admit(2)
	tk.Done(1, 0, 0)
	tk2.Cancel(2)
	if old.inFlight.Load() != 0 || old.done.Load() != 1 || next.inFlight.Load() != 0 || next.canceled.Load() != 1 {
		t.Fatal("a completion went to the wrong predicate")
	}
	a.SetPredicate(nil, nil)
	if tk, err := a.Admit(3); err != nil || tk.Predicate() != nil {
		t.Fatal("nil predicate must admit everything")
	}
}

func TestAdmissionConcurrent(t *testing.T) {
	var a sink.Admission
	preds := []*credit{{limit: 5}, {limit: 50}, {limit: 1}}
	a.SetPredicate(nil, preds[0])
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			a.SetPredicate(nil, preds[i%len(preds)])
		}
	}()
	var workers sync.WaitGroup
	for g := 0; g < 4; g++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := 0; i < 2000; i++ {
				tk, err := a.Admit(i)
				if err != nil {
					continue
				}
				if i%2 == 0 {
					tk.Done(i, 0, 0)
				} else {
					tk.Cancel(i)
				}
			}
		}()
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	for i, p := range preds {
		if n := p.inFlight.Load(); n != 0 {
			t.Errorf("predicate %d: %d in flight", i, n)
		}
	}
}

// wrapper is a predicate built on others that implements none of the
// runtime's hooks itself: the sink must reach its children's.
type wrapper struct{ kids []sink.Predicate }

func (w *wrapper) Accept(e sink.Event) bool {
	for i, k := range w.kids {
		if !k.Accept(e) {
			for _, back := range w.kids[:i] {
				sink.Cancel(back, e)
			}
			return false
		}
	}
	return true
}
func (w *wrapper) Children() []sink.Predicate { return w.kids }

// shedAll sheds every event that waited at all.
type shedAll struct{ credit }

func (s *shedAll) Shed(_ sink.Event, waited time.Duration) bool { return waited > 0 }

func TestAdmissionReachesChildren(t *testing.T) {
	inner, other := &credit{limit: 1}, &credit{limit: 5}
	tree := &wrapper{kids: []sink.Predicate{other, &wrapper{kids: []sink.Predicate{inner}}}}
	s := &named{}
	s.SetPredicate(tree)
	for _, c := range []*credit{inner, other} {
		if c.bound.Load() == nil {
			t.Fatal("a nested Binder was not bound")
		}
	}
	tk, err := s.admit(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.admit(2); err == nil { // inner is full: other gets 2 back
		t.Fatal("nested limit of 1 not applied")
	}
	if other.inFlight.Load() != 1 || other.canceled.Load() != 1 {
		t.Fatalf("the refusal did not cancel the sibling that admitted: %d in flight", other.inFlight.Load())
	}
	tk.Done(1, 0, 0)
	if inner.inFlight.Load() != 0 || other.inFlight.Load() != 0 || inner.done.Load() != 1 || other.done.Load() != 1 {
		t.Fatal("Ticket.Done did not reach every Completer of the tree exactly once")
	}
	// The package functions walk the tree the same way.
	if !tree.Accept(3) {
		t.Fatal("refused")
	}
	sink.Cancel(tree, 3)
	if inner.inFlight.Load() != 0 || other.inFlight.Load() != 0 {
		t.Fatal("sink.Cancel did not reach the tree")
	}
	if !sink.Shed(&wrapper{kids: []sink.Predicate{&shedAll{}}}, 1, time.Second) {
		t.Fatal("sink.Shed did not reach a nested Shedder")
	}
	var seen int
	sink.Walk(tree, func(sink.Predicate) { seen++ })
	if seen != 4 {
		t.Fatalf("Walk visited %d predicates, want 4", seen)
	}
}

// TestQueueShedsThroughComposites: a Shedder inside a composite sheds
// queued events (it used to be asked only when installed on its own).
func TestQueueShedsThroughComposites(t *testing.T) {
	q := sink.NewQueue(0)
	sh := &shedAll{credit: credit{limit: 10}}
	q.SetPredicate(&wrapper{kids: []sink.Predicate{sh}})
	for i := 0; i < 3; i++ {
		if err := q.Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Millisecond)
	rt := sinkrt.Of(q)
	if !rt.Sheds() {
		t.Fatal("the queue does not see the nested Shedder")
	}
	buf, stamps := make([]sink.Event, 3), make([]int64, 3)
	n := q.Dequeue(buf, stamps)
	kept := rt.Expire(buf[:n], stamps[:n], sink.Nanotime())
	rt.Finish(n)
	if kept != 0 || q.Shed() != 3 {
		t.Fatalf("kept %d, shed %d; want every event shed", kept, q.Shed())
	}
	if sh.inFlight.Load() != 0 || sh.canceled.Load() != 3 {
		t.Fatalf("shed events not cancelled on the nested predicate: %d in flight", sh.inFlight.Load())
	}
}

// serviceLog records the service times Done is told, per event.
type serviceLog struct {
	mu      sync.Mutex
	service map[sink.Event]time.Duration
}

func (l *serviceLog) Accept(sink.Event) bool { return true }
func (l *serviceLog) Done(e sink.Event, _, service time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.service == nil {
		l.service = map[sink.Event]time.Duration{}
	}
	l.service[e] += service
}

// sharingLog is a serviceLog that is charged events' shares.
type sharingLog struct{ serviceLog }

func (*sharingLog) SharesService() {}

// TestBatchCompletionShares: a batch of 10 events handled in 10 ms
// charges a ServiceSharer 1 ms per event, so its charges add up to the
// batch's time, while the other Completers of the same predicate tree are
// told each event's response time, the whole 10 ms. A batch of one gets
// the same time either way.
func TestBatchCompletionShares(t *testing.T) {
	for _, tc := range []struct {
		name  string
		whole *serviceLog // nil: the sharer alone
	}{{"sharer alone", nil}, {"beside a Completer", &serviceLog{}}} {
		t.Run(tc.name, func(t *testing.T) {
			share := &sharingLog{}
			var p sink.Predicate = share
			if tc.whole != nil {
				p = &wrapper{kids: []sink.Predicate{tc.whole, share}}
			}
			q := sink.NewQueue(0)
			q.SetPredicate(p)
			for i := range 11 {
				if err := q.Enqueue(i); err != nil {
					t.Fatal(err)
				}
			}
			evs, stamps := make([]sink.Event, 11), make([]int64, 11)
			if n := q.Dequeue(evs, stamps); n != 11 {
				t.Fatalf("dequeued %d", n)
			}
			const batch = 10 * time.Millisecond
			for i := range 10 { // one batch of 10
				c, ok := sinkrt.Of(q).CompleterAt(stamps[i]).(sinkrt.BatchCompleter)
				if !ok {
					t.Fatalf("CompleterAt is %T, not a BatchCompleter", sinkrt.Of(q).CompleterAt(stamps[i]))
				}
				c.DoneInBatch(evs[i], 0, batch, 10)
			}
			sinkrt.Of(q).CompleterAt(stamps[10]).(sinkrt.BatchCompleter).DoneInBatch(evs[10], 0, batch, 1)
			var sum time.Duration
			for i := range 10 {
				if got := share.service[i]; got != time.Millisecond {
					t.Errorf("sharer charged event %d %v, want 1ms", i, got)
				}
				sum += share.service[i]
				if tc.whole != nil && tc.whole.service[i] != batch {
					t.Errorf("Completer told event %d %v, want the batch's 10ms", i, tc.whole.service[i])
				}
			}
			if sum != batch {
				t.Errorf("sharer charged the batch %v in all, want %v", sum, batch)
			}
			if got := share.service[10]; got != batch {
				t.Errorf("a batch of one charged %v, want %v", got, batch)
			}
		})
	}
}

// TestCompleterAtPlainCompleter: a lone Completer that is not a
// ServiceSharer is handed to the runtime as it is (no indirection).
func TestCompleterAtPlainCompleter(t *testing.T) {
	l := &serviceLog{}
	q := sink.NewQueue(0)
	q.SetPredicate(l)
	_ = q.Enqueue(1)
	evs, stamps := make([]sink.Event, 1), make([]int64, 1)
	q.Dequeue(evs, stamps)
	if got := sinkrt.Of(q).CompleterAt(stamps[0]); got != sinkrt.Completer(l) {
		t.Fatalf("CompleterAt = %T, want the predicate itself", got)
	}
}

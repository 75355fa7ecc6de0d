package sink

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
)

// parked waits until n consumers are parked on q; the deadline only guards
// against a hang.
func parked(t *testing.T, q *Queue, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for q.parked() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d consumers parked, want %d", q.parked(), n)
		}
		runtime.Gosched()
	}
}

type parkResult struct {
	e  Event
	ok bool
}

func parkAsync(q *Queue) (*sinkrt.Waiter, chan parkResult) {
	w := sinkrt.NewWaiter()
	out := make(chan parkResult, 1)
	go func() {
		e, _, ok := q.park(w)
		out <- parkResult{e, ok}
	}()
	return w, out
}

// An enqueue on the empty queue goes straight to the parked consumer,
// counted as dequeued; the next, with nobody parked, waits in the queue.
func TestParkHandOff(t *testing.T) {
	q := NewQueue(0)
	_, out := parkAsync(q)
	parked(t, q, 1)
	if err := q.Enqueue("a"); err != nil {
		t.Fatal(err)
	}
	if r := <-out; !r.ok || r.e != "a" {
		t.Fatalf("park = %v, %v; want the event handed over", r.e, r.ok)
	}
	if err := q.Enqueue("b"); err != nil {
		t.Fatal(err)
	}
	if st := q.Stats(); st.Enqueued != 2 || st.Dequeued != 1 || q.Len() != 1 {
		t.Fatalf("stats %+v, len %d; want 2 enqueued, 1 dequeued, 1 queued", st, q.Len())
	}
	// Events are runnable: park returns at once, and Dequeue gets them.
	if _, _, ok := q.park(sinkrt.NewWaiter()); ok {
		t.Fatal("park handed over an event that was queued")
	}
	buf := make([]Event, 4)
	if n := q.Dequeue(buf, nil); n != 1 || buf[0] != "b" {
		t.Fatalf("Dequeue = %d %v", n, buf[:n])
	}
}

// No hand-off while paused or with a scheduler: events keep their order
// and the pause; Resume wakes the parked consumer.
func TestParkNoHandOffWhilePaused(t *testing.T) {
	q := NewQueue(0)
	q.pause()
	_, out := parkAsync(q)
	parked(t, q, 1)
	if err := q.Enqueue(1); err != nil {
		t.Fatal(err)
	}
	q.Close() // wakes the consumer, and leaves a token for the next
	if r := <-out; r.ok {
		t.Fatalf("park handed over %v on a paused queue", r.e)
	}
	if _, _, ok := q.park(sinkrt.NewWaiter()); ok {
		t.Fatal("token taken as an event")
	}
	// Closed but not drained, and paused: the consumer parks again
	// instead of spinning.
	_, out = parkAsync(q)
	parked(t, q, 1)
	q.resume()
	if r := <-out; r.ok {
		t.Fatalf("park handed over %v after Resume; want a wake-up", r.e)
	}
	buf := make([]Event, 4)
	if n := q.Dequeue(buf, nil); n != 1 || buf[0] != 1 {
		t.Fatalf("Dequeue = %d %v", n, buf[:n])
	}
	if _, _, ok := q.park(sinkrt.NewWaiter()); ok || !q.Drained() {
		t.Fatal("park on a closed, drained queue must return at once")
	}
}

// wakeAll wakes every parked consumer; a wake-up that finds nobody parked
// is kept for the next one to park.
func TestParkWakeAll(t *testing.T) {
	q := NewQueue(0)
	var outs []chan parkResult
	for range 3 {
		_, out := parkAsync(q)
		outs = append(outs, out)
	}
	parked(t, q, 3)
	q.wakeAll()
	for _, out := range outs {
		if r := <-out; r.ok {
			t.Fatalf("woken with %v, want a bare wake-up", r.e)
		}
	}
	q.signalReady() // nobody parked: a token
	if _, _, ok := q.park(sinkrt.NewWaiter()); ok {
		t.Fatal("token taken as an event")
	}
}

// EnqueueWait holds a producer back while an unbounded queue is
// backlogged, and lets it through as soon as events leave the queue;
// Enqueue itself never refuses.
func TestEnqueueWaitPacedOnBacklog(t *testing.T) {
	q := NewQueue(0)
	for i := 0; i <= softBound; i++ {
		if err := q.Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	if !q.Backlogged() {
		t.Fatalf("%d events queued, not backlogged", q.Len())
	}
	done := make(chan error, 1)
	go func() { done <- EnqueueWait(context.Background(), q, "last") }()
	// The producer waits (registered for space) until events leave.
	deadline := time.Now().Add(10 * time.Second)
	for q.spaceWait.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("EnqueueWait did not wait on a backlogged queue")
		}
		runtime.Gosched()
	}
	if n := q.Dequeue(make([]Event, 16), nil); n != 16 {
		t.Fatalf("Dequeue = %d", n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := q.Len(), softBound+1-16+1; got != want {
		t.Fatalf("Len = %d, want %d", got, want)
	}
}

// NotifyBacklog: the armed channel hears, once, of the event queued for
// want of a parked consumer that brings the queue to the given length;
// an event handed to a parked consumer does not count, and a queue that
// holds that many events already arms nothing.
func TestNotifyBacklog(t *testing.T) {
	q := NewQueue(0)
	rouse := make(chan struct{}, 1)
	if !q.notifyBacklog(rouse, 1) {
		t.Fatal("NotifyBacklog on an empty queue did not arm")
	}
	_, out := parkAsync(q)
	parked(t, q, 1)
	if err := q.Enqueue("handed"); err != nil {
		t.Fatal(err)
	}
	if r := <-out; !r.ok || r.e != "handed" {
		t.Fatalf("park = %v, %v; want the event handed over", r.e, r.ok)
	}
	select {
	case <-rouse:
		t.Fatal("an event handed to a parked consumer roused the backlog channel")
	default:
	}
	if err := q.Enqueue("queued"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rouse:
	default:
		t.Fatal("an event queued with nobody parked did not rouse the backlog channel")
	}
	if err := q.Enqueue("again"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rouse:
		t.Fatal("the backlog channel was roused twice for one arming")
	default:
	}
	if q.notifyBacklog(rouse, 2) {
		t.Fatal("NotifyBacklog(2) armed on a queue holding 2 events")
	}
	if !q.notifyBacklog(rouse, 4) {
		t.Fatal("NotifyBacklog(4) did not arm on a queue holding 2 events")
	}
	for i, want := range []bool{false, true} { // 3 events, then 4
		if err := q.Enqueue(i); err != nil {
			t.Fatal(err)
		}
		select {
		case <-rouse:
			if !want {
				t.Fatalf("roused at %d events, armed for 4", q.Len())
			}
		default:
			if want {
				t.Fatalf("not roused at %d events, armed for 4", q.Len())
			}
		}
	}
}

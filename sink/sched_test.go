package sink_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
	"github.com/sandstorm-go/sandstorm/sink"
)

// job is a test event with a key, a class/priority and a size.
type job struct {
	id    int
	key   string
	class int
	size  float64
}

func keyOf(e sink.Event) (string, bool) {
	j, ok := e.(job)
	if !ok || j.key == "" {
		return "", false
	}
	return j.key, true
}
func classOf(e sink.Event) int    { return e.(job).class }
func sizeOf(e sink.Event) float64 { return e.(job).size }
func ids(es []sink.Event) (out []int) {
	for _, e := range es {
		out = append(out, e.(job).id)
	}
	return out
}

func scheduled(t *testing.T, s sink.Scheduler) *sink.Queue {
	t.Helper()
	q := sink.NewQueue(0)
	if err := q.SetScheduler(s); err != nil {
		t.Fatal(err)
	}
	return q
}

func dequeueIDs(q *sink.Queue, batch int) []int {
	buf := make([]sink.Event, batch)
	n := q.Dequeue(buf, nil)
	return ids(buf[:n])
}

func TestSchedulerOrders(t *testing.T) {
	stride, err := sink.NewStride(map[int]int{0: 1, 1: 3}, classOf)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		sched sink.Scheduler
		in    []job
		batch int
		want  [][]int // successive Dequeue results
	}{
		{"fifo", sink.NewFIFO(), []job{{id: 1}, {id: 2}, {id: 3}}, 2, [][]int{{1, 2}, {3}}},
		{"lifo", sink.NewLIFO(), []job{{id: 1}, {id: 2}, {id: 3}, {id: 4}}, 3, [][]int{{4, 3, 2}, {1}}},
		{"priority", sink.NewPriority(classOf),
			[]job{{id: 1, class: 0}, {id: 2, class: 5}, {id: 3, class: -1}, {id: 4, class: 5}, {id: 5, class: 0}},
			2, [][]int{{2, 4}, {1, 5}, {3}}},
		{"stride", stride,
			[]job{{id: 1, class: 0}, {id: 2, class: 0}, {id: 3, class: 0}, {id: 4, class: 1}, {id: 5, class: 1}, {id: 6, class: 1}, {id: 7, class: 1}},
			4, [][]int{{1, 4, 5, 6}, {7, 2, 3}}},
		{"shortest within a batch", sink.NewShortest(sizeOf),
			[]job{{id: 1, size: 9}, {id: 2, size: 1}, {id: 3, size: 5}, {id: 4, size: 1}, {id: 5, size: 0}},
			4, [][]int{{2, 4, 3, 1}, {5}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := scheduled(t, tt.sched)
			for _, j := range tt.in {
				if err := q.Enqueue(j); err != nil {
					t.Fatal(err)
				}
			}
			for i, want := range tt.want {
				if got := dequeueIDs(q, tt.batch); !slices.Equal(got, want) {
					t.Fatalf("dequeue %d = %v, want %v", i, got, want)
				}
			}
			if q.Len() != 0 || sinkrt.Of(q).Runnable() != 0 || len(dequeueIDs(q, 8)) != 0 {
				t.Fatalf("left Len %d Runnable %d", q.Len(), sinkrt.Of(q).Runnable())
			}
		})
	}
}

// TestStrideShareCounted runs two backlogged classes through a stride
// scheduler and counts service: 3:1 tickets give 3:1 service.
func TestStrideShareCounted(t *testing.T) {
	for _, tickets := range []map[int]int{{0: 1, 1: 3}, {0: 2, 1: 5}, {0: 7, 1: 7}} {
		t.Run(fmt.Sprint(tickets), func(t *testing.T) {
			s, err := sink.NewStride(tickets, classOf)
			if err != nil {
				t.Fatal(err)
			}
			q := scheduled(t, s)
			const n = 20000
			for i := 0; i < n; i++ {
				_ = q.Enqueue(job{id: i, class: i % 2})
			}
			served := map[int]int{}
			buf := make([]sink.Event, 7)
			for total := 0; total < n/2; {
				k := q.Dequeue(buf, nil)
				for _, e := range buf[:k] {
					served[classOf(e)]++
				}
				total += k
			}
			want := float64(tickets[1]) / float64(tickets[0])
			got := float64(served[1]) / float64(served[0])
			if got < want*0.99 || got > want*1.01 {
				t.Fatalf("served %v: ratio %.3f, want %.3f", served, got, want)
			}
		})
	}
}

func TestStrideIdleClassBanksNoCredit(t *testing.T) {
	s, _ := sink.NewStride(map[int]int{0: 1, 1: 1}, classOf)
	q := scheduled(t, s)
	// class 0 runs alone for a while
	for i := 0; i < 100; i++ {
		_ = q.Enqueue(job{id: i, class: 0})
	}
	for len(dequeueIDs(q, 10)) > 0 {
	}
	// now both are backlogged: class 1 must not get 100 events in a row
	for i := 0; i < 20; i++ {
		_ = q.Enqueue(job{id: 1000 + i, class: 1})
		_ = q.Enqueue(job{id: 2000 + i, class: 0})
	}
	buf := make([]sink.Event, 10)
	n := q.Dequeue(buf, nil)
	count := map[int]int{}
	for _, e := range buf[:n] {
		count[classOf(e)]++
	}
	if count[0] != 5 || count[1] != 5 {
		t.Fatalf("first batch after idle %v: want an even split", count)
	}
}

func TestNewStrideRejectsBadTickets(t *testing.T) {
	if _, err := sink.NewStride(map[int]int{0: 0}, classOf); err == nil {
		t.Fatal("zero tickets accepted")
	}
	if _, err := sink.NewStride(map[int]int{1: -3}, classOf); err == nil {
		t.Fatal("negative tickets accepted")
	}
}

func TestKeyedOneAtATimePerKey(t *testing.T) {
	q := scheduled(t, sink.NewKeyed(keyOf, nil))
	for i, k := range []string{"a", "a", "b", "", "a", "b", ""} {
		_ = q.Enqueue(job{id: i, key: k})
	}
	if q.Len() != 7 || sinkrt.Of(q).Runnable() != 4 { // a0, b2, 3, 6
		t.Fatalf("Len %d Runnable %d", q.Len(), sinkrt.Of(q).Runnable())
	}
	first := dequeueIDs(q, 10)
	if !slices.Equal(first, []int{0, 2, 3, 6}) {
		t.Fatalf("first batch %v", first)
	}
	if got := dequeueIDs(q, 10); len(got) != 0 {
		t.Fatalf("keys a and b still running, got %v", got)
	}
	sinkrt.Of(q).Release([]sink.Event{job{id: 0, key: "a"}})
	if got := dequeueIDs(q, 10); !slices.Equal(got, []int{1}) {
		t.Fatalf("after releasing a: %v", got)
	}
	sinkrt.Of(q).Release([]sink.Event{job{id: 2, key: "b"}, job{id: 1, key: "a"}, job{id: 3}})
	if got := dequeueIDs(q, 10); !slices.Equal(got, []int{5, 4}) {
		t.Fatalf("after releasing b and a: %v", got)
	}
	sinkrt.Of(q).Release([]sink.Event{job{id: 5, key: "b"}, job{id: 4, key: "a"}})
	if q.Len() != 0 {
		t.Fatalf("Len %d", q.Len())
	}
	// a spurious release is harmless
	sinkrt.Of(q).Release([]sink.Event{job{id: 4, key: "a"}})
	_ = q.Enqueue(job{id: 9, key: "a"})
	if got := dequeueIDs(q, 10); !slices.Equal(got, []int{9}) {
		t.Fatalf("fresh key: %v", got)
	}
}

func TestKeyedRemoveIfMovesKeyOn(t *testing.T) {
	k := sink.NewKeyed(keyOf, nil)
	q := scheduled(t, k)
	for i, key := range []string{"p", "p", "p", "q", "q"} {
		_ = q.Enqueue(job{id: i, key: key})
	}
	// p0 runs; p1, p2 wait behind it; q3 is visible, q4 waits
	if got := dequeueIDs(q, 1); !slices.Equal(got, []int{0}) {
		t.Fatal(got)
	}
	removed := ids(sinkrt.Of(q).RemoveIf(func(e sink.Event) bool { return e.(job).id == 1 || e.(job).id == 3 }))
	slices.Sort(removed)
	if !slices.Equal(removed, []int{1, 3}) {
		t.Fatalf("removed %v", removed)
	}
	if q.Len() != 2 || k.Keys() != 2 {
		t.Fatalf("Len %d keys %d", q.Len(), k.Keys())
	}
	if got := dequeueIDs(q, 10); !slices.Equal(got, []int{4}) {
		t.Fatalf("q moves on to its next event, p stays behind p0: %v", got)
	}
	sinkrt.Of(q).Release([]sink.Event{job{id: 0, key: "p"}})
	if got := dequeueIDs(q, 10); !slices.Equal(got, []int{2}) {
		t.Fatalf("after p0: %v", got)
	}
	if st := q.Stats(); st.Removed != 2 || st.Dequeued != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRemoveIfFIFORing(t *testing.T) {
	p := &countingPredicate{limit: 100}
	q := sink.NewQueue(8)
	q.SetPredicate(p)
	buf := make([]sink.Event, 5)
	for i := 0; i < 5; i++ { // move the head so the ring wraps
		_ = q.Enqueue(-1)
	}
	q.Dequeue(buf, nil)
	for i := 0; i < 8; i++ {
		if err := q.Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	odd := sinkrt.Of(q).RemoveIf(func(e sink.Event) bool { return e.(int)%2 == 1 })
	if !slices.Equal(odd, []sink.Event{1, 3, 5, 7}) {
		t.Fatalf("removed %v", odd)
	}
	if p.cancels != 4 {
		t.Fatalf("predicate got %d cancels, want 4", p.cancels)
	}
	if got := drain(q); !slices.Equal(got, []sink.Event{0, 2, 4, 6}) {
		t.Fatalf("left %v", got)
	}
}

func TestPauseResume(t *testing.T) {
	for _, s := range []sink.Scheduler{nil, sink.NewLIFO()} {
		q := sink.NewQueue(0)
		if s != nil {
			_ = q.SetScheduler(s)
		}
		_ = q.Enqueue(job{id: 1})
		sinkrt.Of(q).Pause()
		_ = q.Enqueue(job{id: 2})
		select { // drop tokens left by the enqueues
		case <-q.Ready():
		default:
		}
		if got := dequeueIDs(q, 4); len(got) != 0 || sinkrt.Of(q).Runnable() != 0 || q.Len() != 2 || !sinkrt.Of(q).Paused() {
			t.Fatalf("paused queue handed out %v (Runnable %d Len %d)", got, sinkrt.Of(q).Runnable(), q.Len())
		}
		sinkrt.Of(q).Resume()
		select {
		case <-q.Ready():
		default:
			t.Fatal("Resume did not wake a consumer")
		}
		if sinkrt.Of(q).Runnable() != 2 || len(dequeueIDs(q, 4)) != 2 {
			t.Fatal("events lost across a pause")
		}
	}
}

func TestSetSchedulerOnBusyQueue(t *testing.T) {
	q := sink.NewQueue(0)
	_ = q.Enqueue(1)
	if err := q.SetScheduler(sink.NewLIFO()); !errors.Is(err, sink.ErrSchedulerBusy) {
		t.Fatalf("SetScheduler = %v", err)
	}
}

func TestDiscardWithScheduler(t *testing.T) {
	q := scheduled(t, sink.NewKeyed(keyOf, sink.NewLIFO()))
	for i := 0; i < 6; i++ {
		_ = q.Enqueue(job{id: i, key: fmt.Sprint(i % 2)})
	}
	got := ids(q.Discard())
	slices.Sort(got)
	if !slices.Equal(got, []int{0, 1, 2, 3, 4, 5}) || q.Len() != 0 || q.Pending() != 0 {
		t.Fatalf("discarded %v, Len %d", got, q.Len())
	}
}

// TestKeyedConcurrentConsumers has several consumers dequeue and release
// under -race: a key is never held by two of them at once, and every
// key's events come out in order.
func TestKeyedConcurrentConsumers(t *testing.T) {
	const keys, perKey, consumers = 8, 2000, 4
	q := scheduled(t, sink.NewKeyed(keyOf, nil))
	var active [keys]atomic.Int32
	var last [keys]atomic.Int64
	for i := range last {
		last[i].Store(-1)
	}
	var handled atomic.Int64
	var wg sync.WaitGroup
	var bad atomic.Value
	for c := 0; c < consumers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]sink.Event, 3)
			for handled.Load() < keys*perKey {
				n := q.Dequeue(buf, nil)
				if n == 0 {
					select {
					case <-q.Ready():
					case <-q.Closed():
					}
					continue
				}
				for _, e := range buf[:n] {
					j := e.(job)
					k := j.class
					if active[k].Add(1) != 1 {
						bad.Store(fmt.Sprintf("key %d held twice", k))
					}
					if prev := last[k].Swap(int64(j.id)); prev >= int64(j.id) {
						bad.Store(fmt.Sprintf("key %d: %d after %d", k, j.id, prev))
					}
					active[k].Add(-1)
				}
				sinkrt.Of(q).Release(buf[:n])
				handled.Add(int64(n))
			}
			q.Close() // wake the others
		}()
	}
	var pw sync.WaitGroup
	for k := 0; k < keys; k++ {
		pw.Add(1)
		go func() {
			defer pw.Done()
			for i := 0; i < perKey; i++ {
				_ = q.Enqueue(job{id: i, key: fmt.Sprint(k), class: k})
			}
		}()
	}
	pw.Wait()
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	if handled.Load() != keys*perKey || q.Len() != 0 {
		t.Fatalf("handled %d, left %d", handled.Load(), q.Len())
	}
}

// FuzzSchedulers drives every scheduler with random pushes, pops, releases
// and removals and checks that no event is lost or duplicated.
func FuzzSchedulers(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 200, 201, 130})
	f.Add([]byte{9, 9, 9, 9, 255, 254, 128, 129, 1, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		stride, _ := sink.NewStride(map[int]int{0: 1, 1: 3}, classOf)
		for _, s := range []sink.Scheduler{
			sink.NewFIFO(), sink.NewLIFO(), sink.NewPriority(classOf), stride,
			sink.NewShortest(sizeOf), sink.NewKeyed(keyOf, nil), sink.NewKeyed(keyOf, sink.NewPriority(classOf)),
		} {
			q := scheduled(t, s)
			inQueue := map[int]bool{}
			var running []sink.Event
			next := 0
			buf := make([]sink.Event, 4)
			for _, op := range ops {
				switch {
				case op < 128: // push
					key := ""
					if op%3 != 0 {
						key = fmt.Sprint(op % 4)
					}
					_ = q.Enqueue(job{id: next, key: key, class: int(op % 2), size: float64(op % 5)})
					inQueue[next] = true
					next++
				case op < 192: // pop
					n := q.Dequeue(buf[:1+int(op)%4], nil)
					for _, e := range buf[:n] {
						id := e.(job).id
						if !inQueue[id] {
							t.Fatalf("%T: event %d out twice or never in", s, id)
						}
						delete(inQueue, id)
						running = append(running, e)
					}
				case op < 240: // release what runs
					sinkrt.Of(q).Release(running)
					running = running[:0]
				default: // remove some
					for _, e := range sinkrt.Of(q).RemoveIf(func(e sink.Event) bool { return e.(job).id%int(op-238) == 0 }) {
						id := e.(job).id
						if !inQueue[id] {
							t.Fatalf("%T: removed %d not queued", s, id)
						}
						delete(inQueue, id)
					}
				}
				if q.Len() != len(inQueue) || sinkrt.Of(q).Runnable() > q.Len() {
					t.Fatalf("%T: Len %d Runnable %d, model %d", s, q.Len(), sinkrt.Of(q).Runnable(), len(inQueue))
				}
			}
			sinkrt.Of(q).Release(running)
			for len(inQueue) > 0 {
				n := q.Dequeue(buf, nil)
				if n == 0 {
					t.Fatalf("%T: %d events stuck", s, len(inQueue))
				}
				for _, e := range buf[:n] {
					delete(inQueue, e.(job).id)
				}
				sinkrt.Of(q).Release(buf[:n])
			}
		}
	})
}

func BenchmarkSchedulers(b *testing.B) {
	stride, _ := sink.NewStride(map[int]int{0: 1, 1: 3}, classOf)
	for _, tt := range []struct {
		name string
		s    sink.Scheduler
	}{
		{"ring", nil}, {"fifo", sink.NewFIFO()}, {"lifo", sink.NewLIFO()}, {"priority", sink.NewPriority(classOf)},
		{"stride", stride}, {"shortest", sink.NewShortest(sizeOf)}, {"keyed", sink.NewKeyed(keyOf, nil)},
	} {
		b.Run(tt.name, func(b *testing.B) {
			q := sink.NewQueue(0)
			if tt.s != nil {
				_ = q.SetScheduler(tt.s)
			}
			evs := make([]sink.Event, 64)
			for i := range evs {
				evs[i] = job{id: i, key: fmt.Sprint(i % 16), class: i % 2, size: float64(i % 7)}
			}
			buf := make([]sink.Event, 16)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_ = q.Enqueue(evs[i%64])
				if i%16 == 15 {
					n := q.Dequeue(buf, nil)
					sinkrt.Of(q).Release(buf[:n])
				}
			}
		})
	}
}
